"""The door of the actions that write one checkpoint from another (`checkpoint.safety.door`): the
overlap refused before any lease, both leases taken in one order, a held one refusing the action
before it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.errors import LeaseHeld, LeaseLost, OverlapRefused
from checkpoint.fork import fork_checkpoint
from checkpoint.safety import TwoSided, held_by, lease_for, taken_at_once
from checkpoint.storage import Storage


def _taken(log: list[str]):
    take = taken_at_once("tests")

    def taking(storage: Storage, what: str):
        log.append(f"{Path(storage.root).name}: {what}")
        return take(storage, what)

    return taking


@pytest.mark.parametrize("dest", ["src/inside", "."])
def test_an_overlap_is_refused_before_any_lease_is_taken(tmp_path: Path, dest: str) -> None:
    (tmp_path / "src").mkdir()
    taken: list[str] = []
    request = TwoSided(Storage(str(tmp_path / "src")), Storage(str(tmp_path / dest)), _taken(taken))
    with pytest.raises(OverlapRefused, match="overlap"):
        fork_checkpoint(request)
    assert taken == []
    assert not any(p.name == "_ckpt_audit" for p in tmp_path.rglob("*"))


def test_both_leases_are_taken_source_first_and_checked_together(tmp_path: Path) -> None:
    taken: list[str] = []
    request = TwoSided(Storage(str(tmp_path / "src")), Storage(str(tmp_path / "dest")), _taken(taken))
    with request.held("fork") as check:
        check()
        assert taken == ["src: fork (source)", "dest: fork"]
        # Both are held: another action on either side is refused.
        for side in ("src", "dest"):
            with pytest.raises(LeaseHeld):
                lease_for(Storage(str(tmp_path / side)), "another").acquire()
    # Given back at the end: both can be taken again.
    for side in ("src", "dest"):
        with lease_for(Storage(str(tmp_path / side)), "another").acquire():
            pass


def test_a_held_destination_refuses_the_fork_before_it_writes(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    dest = Storage(str(tmp_path / "dest"))
    with lease_for(dest, "someone else").acquire():
        with pytest.raises(LeaseHeld, match="someone else"):
            fork_checkpoint(TwoSided(Storage(str(tmp_path / "src")), dest, taken_at_once("tests")))
    assert not (tmp_path / "dest").exists()


def test_a_check_fails_once_either_lease_is_lost(tmp_path: Path) -> None:
    request = TwoSided(
        Storage(str(tmp_path / "src")), Storage(str(tmp_path / "dest")), taken_at_once("tests")
    )
    leases = []

    def keep(storage: Storage, what: str):
        leases.append(taken_at_once("tests")(storage, what))
        return leases[-1]

    with TwoSided(request.src, request.dest, keep).held("fork") as check:
        leases[0].release()  # the source's, as a takeover would leave it
        with pytest.raises(LeaseLost):
            check()


def test_an_action_inside_another_goes_through_its_door_on_the_outer_leases(tmp_path: Path) -> None:
    """A repartition's backup fork, a retirement's archive: the inner door takes no lease of its
    own (the outer one holds them, and would refuse it), and its check is the outer one's."""
    outer = TwoSided(Storage(str(tmp_path / "src")), Storage(str(tmp_path / "dest")), taken_at_once("tests"))
    leases = []

    def keep(storage: Storage, what: str):
        leases.append(taken_at_once("tests")(storage, what))
        return leases[-1]

    with TwoSided(outer.src, outer.dest, keep).held("repartition") as check:
        inner = TwoSided(outer.src, Storage(str(tmp_path / "backup")), held_by(check))
        with inner.held("backup") as inner_check:
            inner_check()
            assert len(leases) == 2 and not (tmp_path / "backup").exists()  # nothing taken, nothing written
            leases[1].release()
            with pytest.raises(LeaseLost):
                inner_check()


@pytest.mark.parametrize("spelling", ["link", "link-to-parent", "not-yet-made-below-link"])
def test_an_overlap_is_a_place_not_a_spelling(tmp_path: Path, spelling: str) -> None:
    """Containment by place (docs/safety.md): a destination spelled through a link into the source,
    or to a folder holding it, or not made yet below such a link, overlaps it."""
    src = tmp_path / "src"
    (src / "spare").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(src / "spare" if spelling != "link-to-parent" else tmp_path)
    dest = {"link": link, "link-to-parent": link, "not-yet-made-below-link": link / "a" / "b"}
    taken: list[str] = []
    request = TwoSided(Storage(str(src)), Storage(str(dest[spelling])), _taken(taken))
    with pytest.raises(OverlapRefused, match="resolves to"):
        fork_checkpoint(request)
    assert taken == [] and not (src / "spare" / "a").exists()


def test_a_fork_through_a_link_into_its_source_writes_nothing(corpus, tmp_path: Path) -> None:
    """`ckpt fork SRC DEST`, DEST a link to an empty folder inside SRC, wrote 388 files and a lease
    inside the source, exit 0."""
    from testbed.copying import copy_checkpoint
    from tests.support.cli import ckpt
    from tests.support.files import files_of

    src = tmp_path / "src"
    copy_checkpoint(corpus["snapshots"], src)
    (src / "spare").mkdir()
    link = tmp_path / "dest"
    link.symlink_to(src / "spare")
    before = files_of(src)
    out = ckpt("fork", str(src), str(link))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "the destination and the source overlap" in out.stderr and "resolves to" in out.stderr
    assert files_of(src) == before and not any((src / "spare").iterdir())
