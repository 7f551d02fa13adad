"""A local checkpoint's place (`LocalBackend.identity`: the lease's folder, and what the door's
overlap checks compare) is one for every spelling of it: on a disk that ignores case, simulated
below a folder as a volume mounted there, each name is folded as the folder holding it folds it;
links and a file's second name in another case never make a disk that keeps case look like one
that ignores it."""

from __future__ import annotations

import os

import pytest

from checkpoint.storage import Storage


def _ignoring_case_below(monkeypatch, top) -> None:
    """A disk that ignores case below `top` (a volume mounted there, say), simulated: a name in a
    folder below it is found in any case, as macOS' and Windows' disks find it."""
    real = {"stat": os.stat, "lstat": os.lstat}
    prefix = f"{top}/"

    def matched(path) -> str:
        path = os.fspath(path)
        if not path.startswith(prefix):
            return path
        out = str(top)
        for name in path[len(prefix) :].split("/"):
            try:
                name = next((n for n in os.listdir(out) if n.casefold() == name.casefold()), name)
            except OSError:
                pass
            out = os.path.join(out, name)
        return out

    for call, original in real.items():
        monkeypatch.setattr(os, call, lambda path, *a, _o=original, **k: _o(matched(path), *a, **k))


@pytest.mark.parametrize("name", ["q1", "2024", "2024/0"])
def test_two_spellings_of_a_checkpoint_on_a_disk_that_ignores_case_are_one_place(
    tmp_path, monkeypatch, name
) -> None:
    """Below a volume that ignores case (simulated), `Data/<name>`, `DATA/<name>` and `data/<name>`
    are one place, also for a name without letters (a dated folder had two leases), and a folder
    not made yet has the place it gets once made (a fork's DEST takes its lease first). On this
    disk, which keeps case, two spellings stay two places."""
    from checkpoint.safety import Place

    (tmp_path / "Data" / name).mkdir(parents=True)
    kept = [Storage(str(tmp_path / "Data" / name)), Storage(str(tmp_path / "DATA" / name))]
    assert Place.of(kept[0]) != Place.of(kept[1])
    volume = tmp_path / "Vol"
    (volume / "Data" / name).mkdir(parents=True)
    _ignoring_case_below(monkeypatch, volume)
    places = {Place.of(Storage(str(volume / spelled / name))) for spelled in ("Data", "DATA", "data")}
    assert len(places) == 1 and Place.of(Storage(str(volume / "Data"))).contains(*places)
    assert str(*places).startswith(str(volume))  # the mount point's name kept: the disk above keeps case
    new = Storage(str(volume / "Data" / name / "Fork"))
    before = Place.of(new)
    (volume / "Data" / name / "Fork").mkdir()
    assert Place.of(new) == before == Place.of(Storage(str(volume / "DATA" / name / "FORK")))
    # Folded as such a disk folds (`ß` is `ss`), not lower-cased: one place (helper-27).
    (volume / "Straße").mkdir()
    assert len({Place.of(Storage(str(volume / s))) for s in ("Straße", "STRASSE", "strasse")}) == 1


@pytest.mark.parametrize("link", [("T1/DATA", "data"), ("t1/data", "Data")])
def test_a_link_spelled_in_another_case_does_not_make_a_disk_that_keeps_case_ignore_it(
    tmp_path, link
) -> None:
    """On this disk, which keeps case, a folder beside a link whose name is another case of its own
    keeps its place: a check that followed the link took the disk for one that ignores case and
    gave places where nothing is, or another folder's (helper-25, helper-26). A folder not made yet
    has its place once made, and never that of an existing folder spelled in another case."""
    from checkpoint.safety import Place

    name, target = link
    real = tmp_path / name.split("/")[0] / target
    (real / "2024").mkdir(parents=True)
    (real / "new").mkdir()
    (tmp_path / name).symlink_to(real)
    for where in (real / "2024", real / "new"):
        assert Place.of(Storage(str(where))).path == str(where)
    made = Storage(str(real / "New"))
    before = Place.of(made)
    assert before != Place.of(Storage(str(real / "new")))
    (real / "New").mkdir()
    assert Place.of(made) == before and before.path == str(real / "New")


def test_a_file_with_a_second_name_in_another_case_does_not_make_its_folder_ignore_case(tmp_path) -> None:
    """A hard link `readme` to `README` is one entry under two spellings on a disk that keeps case:
    the folder it is in still keeps case for a folder not made yet (helper-27)."""
    from checkpoint.safety import Place

    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "README").write_text("x")
    os.link(tmp_path / "h" / "README", tmp_path / "h" / "readme")
    made = Storage(str(tmp_path / "h" / "New"))
    before = Place.of(made)
    (tmp_path / "h" / "New").mkdir()
    assert Place.of(made) == before and before.path == str(tmp_path / "h" / "New")
