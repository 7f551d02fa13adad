"""Which of the sources' log files the scratch fork adds and which name batch N's input
(`checkpoint.rehearsal.scratch._batch_logs`), on copies of real checkpoints, without Spark: a file
source's log counts its own entries, and a query that reads one source twice has one folder for
two offsets lines. The rehearsal of a batch after a no-data batch, through Spark:
tests/cli/test_rehearse.py."""

from __future__ import annotations

import json

from checkpoint.fork import source_logs
from checkpoint.model import load_head
from checkpoint.rehearsal.scratch import _batch_logs
from checkpoint.storage import Storage


def _logs(path, n):
    storage = Storage(str(path))
    head = load_head(storage, strict=False, batches=[n])
    added, read = _batch_logs(head, n, source_logs(storage, n))
    return [f.rel for f in added], [(entry, f.rel) for entry, f in read]


def _offset(path, batch: int, line: int = 0) -> int:
    return json.loads((path / "offsets" / str(batch)).read_text().split("\n")[2 + line])["logOffset"]


def test_a_batch_reads_the_entries_after_the_batch_before_it(copy_of) -> None:
    path = copy_of("join")
    n = max(int(p.name) for p in (path / "commits").iterdir() if p.name.isdigit())
    spans = [(_offset(path, n - 1, i), _offset(path, n, i)) for i in (0, 1)]
    added, read = _logs(path, n)
    assert read == [(e, f"sources/{i}/{e}") for i, (a, b) in enumerate(spans) for e in range(a + 1, b + 1)]
    assert added == [f"sources/{i}/{n}" for i, (_, b) in enumerate(spans) if b == n]


def test_a_no_data_batch_reads_nothing_and_adds_no_later_entry(copy_of) -> None:
    path = copy_of("watermark")
    n = max(int(p.name) for p in (path / "offsets").iterdir() if p.name.isdigit())
    assert _offset(path, n) == _offset(path, n - 1) < n, "the corpus' watermark query ends on a no-data batch"
    (path / "sources" / "0" / str(n)).write_text((path / "sources" / "0" / str(n - 1)).read_text())
    assert _logs(path, n) == ([], [])  # an entry numbered N belongs to a later batch


def test_a_source_read_twice_names_only_the_first_lines_input(copy_of) -> None:
    """The join's left source read twice: lines left, left, right and folders 0 and 1. Line 1 is not
    folder 1 (the right side's log): only line 0's entries are asked for."""
    path = copy_of("join")
    for f in (path / "offsets").iterdir():
        if f.name.isdigit():
            lines = f.read_text().split("\n")
            f.write_text("\n".join([*lines[:3], lines[2], *lines[3:]]))
    n = max(int(p.name) for p in (path / "commits").iterdir() if p.name.isdigit())
    _, read = _logs(path, n)
    assert read == [(e, f"sources/0/{e}") for e in range(_offset(path, n - 1) + 1, _offset(path, n) + 1)]
    assert read, "the join's newest batch read new files"
