"""A state file read as Spark reads its kind, so that code serving both engines names the file and
not the engine: a changelog by its header's version (typed records from v2 on), a delta or a
snapshot of the HDFS-backed store headerless (a snapshot holds puts only), a zip as the archive
RocksDB's load unpacks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO

from checkpoint.format.changelog import (
    RecordRun,
    check_changelog,
    check_state_file,
    stream_changelog_runs,
    stream_untyped_runs,
)
from checkpoint.format.layout import FileKind
from checkpoint.format.snapshot import check_zip


def _records(kind: FileKind) -> None:
    if not (kind.is_step or kind is FileKind.SNAPSHOT):
        raise ValueError(f"{kind.value} files hold no records of a store")


def count_records(
    kind: FileKind, read: Callable[[int], bytes], codec: str, path: str, *, named_v2: bool = False
) -> int:
    """How many records a changelog, delta or snapshot holds, each checked as Spark's load reads
    it, holding a chunk at a time. `named_v2`: a changelog's name carries an id, so its header must
    lead with a lineage."""
    _records(kind)
    if kind is FileKind.CHANGELOG:
        return check_changelog(read, codec, path, named_v2=named_v2)
    return check_state_file(read, codec, path, snapshot=kind.is_base)


def stream_records(
    kind: FileKind, read: Callable[[int], bytes], codec: str, path: str
) -> Iterator[list[RecordRun]]:
    """A format V1 changelog's, delta's or snapshot's records, a part at a time
    (`stream_untyped_runs`): a migration's source."""
    _records(kind)
    if kind is FileKind.CHANGELOG:
        return stream_changelog_runs(read, codec, path)
    return stream_untyped_runs(read, codec, path)


def check_whole(kind: FileKind, fh: IO[bytes], codec: str, path: str) -> None:
    """A format V1 state file read to its end through `fh` as Spark's load reads it (a fork's
    copy, which no sidecar proves): a zip's entries against their CRC-32s (`fh` seeks; an entry is
    inflated a chunk at a time), the others through their codec's block checksums and every
    record's framing. Raises CorruptFileError."""
    if kind is FileKind.ZIP:
        check_zip(fh, path)
    else:
        count_records(kind, fh.read, codec, path)
