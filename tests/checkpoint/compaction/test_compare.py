"""The rebuild's check without a base: two stores scanned side by side, compared in C. Every
position where they differ counts, and so does each key past the end of the shorter one."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.compaction.rebuild import _compare_all

BASE = [(b"k%03d" % i, b"v") for i in range(10)]


def _store(folder: Path, items: list[tuple[bytes, bytes]]):
    import rocksdict

    db = rocksdict.Rdict(str(folder), options=rocksdict.Options(raw_mode=True))
    for key, value in items:
        db[key] = value
    return db


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [
        (BASE, BASE, (10, 0)),
        (BASE + [(b"z1", b"v"), (b"z2", b"v")], BASE, (12, 2)),
        (BASE, BASE + [(b"z1", b"v")], (10, 1)),
        (BASE[:3] + [(b"k003", b"other")] + BASE[4:], BASE, (10, 1)),
        (BASE[:4] + BASE[5:], BASE, (9, 6)),  # a key missing shifts every later position
        ([], BASE[:2], (0, 2)),
        ([], [], (0, 0)),
    ],
    ids=["equal", "ours longer", "theirs longer", "a value", "a key missing", "ours empty", "both empty"],
)
def test_keys_and_differences_are_counted_by_position(tmp_path, ours, theirs, expected) -> None:
    db, check = _store(tmp_path / "db", ours), _store(tmp_path / "check", theirs)
    try:
        assert _compare_all(db, check) == expected
    finally:
        db.close()
        check.close()
