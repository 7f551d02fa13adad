"""The doors of the actions (`checkpoint.safety.door`): for one that writes a checkpoint from
another, the overlap refused before any lease, both leases taken in one order, a held one refusing
the action before it writes; for every action that keeps records, a trail inside a checkpoint it
touches refused before any lease."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.cleanup import CleanupOptions, apply_cleanup
from checkpoint.errors import LeaseHeld, LeaseLost, OverlapRefused
from checkpoint.expiry import PurgeOptions, purge_expired
from checkpoint.fork import fork_checkpoint
from checkpoint.migrate import MigrationOptions, migrate_checkpoint
from checkpoint.repartition import RepartitionOptions, UndoOptions, repartition_checkpoint, undo_repartition
from checkpoint.safety import AuditTrail, InPlace, TwoSided, held_by, lease_for, taken_at_once
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


def _never() -> None:
    raise AssertionError("the action went on past its door")


# Every action that keeps records, through its own door: each refuses a trail inside its checkpoint.
_IN_PLACE = {
    "cleanup": lambda request: apply_cleanup(request, CleanupOptions(_never)),
    "purge": lambda request: purge_expired(request, PurgeOptions(quiet_seconds=0)),
    "repartition": lambda request: repartition_checkpoint(request, RepartitionOptions(4)),
    "undo": lambda request: undo_repartition(request, UndoOptions(query_stopped=True)),
}


@pytest.mark.parametrize("spelling", ["inside", "through a link"])
@pytest.mark.parametrize("action", sorted(_IN_PLACE))
def test_a_trail_inside_the_checkpoint_is_refused_before_any_lease(
    tmp_path: Path, action: str, spelling: str
) -> None:
    """Records inside a checkpoint are files its logs do not name, which a cleanup deletes: the
    door refuses such a trail by place (a link into the checkpoint too), before the lease and
    before the action reads anything; nothing is made."""
    (tmp_path / "ckpt").mkdir()
    if spelling == "through a link":
        (tmp_path / "elsewhere").symlink_to(tmp_path / "ckpt")
    at = tmp_path / ("ckpt" if spelling == "inside" else "elsewhere") / "audit"
    taken: list[str] = []
    request = InPlace(Storage(str(tmp_path / "ckpt")), _taken(taken), AuditTrail(str(at)))
    with pytest.raises(OverlapRefused, match="the audit trail and the source overlap"):
        _IN_PLACE[action](request)
    assert taken == [] and list((tmp_path / "ckpt").iterdir()) == []
    assert not (tmp_path / "_ckpt_audit").exists()  # where the lease would be


@pytest.mark.parametrize("side", ["src", "dest"])
def test_a_trail_inside_either_side_of_a_migration_is_refused_before_any_lease(
    tmp_path: Path, side: str
) -> None:
    """A trail inside DEST would be deleted with the rest of an interrupted migration's files when
    it starts over; inside SRC, it would be files the source's logs do not name."""
    (tmp_path / "src").mkdir()
    (tmp_path / "dest").mkdir()  # empty, as a migration may find it
    (tmp_path / "link").symlink_to(tmp_path / side, target_is_directory=True)
    taken: list[str] = []
    trail = AuditTrail(str(tmp_path / "link" / "audit"))
    request = TwoSided(Storage(str(tmp_path / "src")), Storage(str(tmp_path / "dest")), _taken(taken), trail)
    named = {"src": "the source", "dest": "the destination"}[side]
    with pytest.raises(
        OverlapRefused, match=f"the audit trail and {named} overlap .*; the audit trail resolves"
    ):
        migrate_checkpoint(request, MigrationOptions())
    assert taken == [] and sorted(p.name for p in tmp_path.iterdir()) == ["dest", "link", "src"]
    assert list((tmp_path / "src").iterdir()) == list((tmp_path / "dest").iterdir()) == []


def test_a_door_without_a_trail_cannot_be_asked_for_one(tmp_path: Path) -> None:
    """An adapter that forgot the trail of an action that keeps records fails at once, before
    any lease: the action asks for it first."""
    taken: list[str] = []
    with pytest.raises(TypeError, match="needs the audit trail"):
        _IN_PLACE["cleanup"](InPlace(Storage(str(tmp_path / "ckpt")), _taken(taken)))
    assert taken == []
