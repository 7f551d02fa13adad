"""How large a file of each kind can legitimately be: what a read of it asks of storage at most
(`Storage.read_bytes(rel, limit=...)`), and past which validation reports it (`FILE_OVER_ITS_BOUND`)
instead of reading it. A `.crc` sidecar made a 1.5 GB sparse file is then a finding in one line,
not 1.5 GB of memory per worker.

The kinds read whole are small by what Spark writes: a sidecar is one JSON object, a log entry or
a metadata file a few KB (16 MiB allowed), a schema file a few KB. The kinds that are the work
itself (changelogs, zips, SSTs, deltas, snapshots) are streamed, or read whole only up to the
size their listing gave; a source log (a file source's compaction can list every file the query
ever read) is read a line at a time, each line bounded."""

from __future__ import annotations

from checkpoint.format.layout import FileKind
from checkpoint.format.unsaferow import MAX_SCHEMA_BYTES
from checkpoint.policy import POLICY

# A commit, an offset, a metadata file: a few KB as Spark writes them.
LOG_BYTES = POLICY.max_log_file_bytes
# Spark's `.crc` sidecar: {"algorithm":"CRC32C","value":<int>,"mainFileSize":<long>}, under 100 bytes.
SIDECAR_BYTES = 4 << 10
# This tool's own small records: a fork marker, a lease generation, a retirement record.
RECORD_BYTES = 1 << 20
# This tool's own logs in the audit trail, read whole: an action's outcomes, a repartition's list
# of the files before it (about 60 bytes a file: 10^7 files are 600 MB).
TRAIL_LOG_BYTES = 1 << 30
# A snapshot zip holds only RocksDB's small files (SSTs lie beside it): read whole up to this,
# streamed beyond.
ZIP_WHOLE_BYTES = 4 << 20
# One line of a file source's log: a path, its size, its time and its action, as JSON.
SOURCE_LOG_LINE_BYTES = 1 << 20
# Hadoop's checksum file: a header of 8 bytes, then 4 per chunk of at least this many bytes.
_HADOOP_MIN_CHUNK = 512

_BOUNDS: dict[FileKind, int] = {
    FileKind.QUERY_METADATA: LOG_BYTES,
    FileKind.OFFSET: LOG_BYTES,
    FileKind.COMMIT: LOG_BYTES,
    FileKind.OPERATOR_METADATA: LOG_BYTES,
    FileKind.STATE_SCHEMA: MAX_SCHEMA_BYTES,
    FileKind.SPARK_CRC: SIDECAR_BYTES,
    FileKind.FORK_MARKER: RECORD_BYTES,
}


def bound_of(kind: FileKind) -> int | None:
    """The most bytes a file of `kind` holds, or None for a kind whose size is its content's
    (state files, SSTs, source logs: streamed, or read up to their listed size)."""
    return _BOUNDS.get(kind)


def hadoop_crc_bytes(main_size: int) -> int:
    """The most bytes Hadoop's checksum file of a `main_size`-byte file holds."""
    return 8 + 4 * (main_size // _HADOOP_MIN_CHUNK + 1)
