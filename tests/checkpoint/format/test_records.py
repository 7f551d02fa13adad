"""A state file's kind answers what it is to a load (`FileKind.is_base`, `is_step`, `lists_files`),
and `checkpoint.format.records` reads a file as Spark reads its kind: the code that serves both
engines asks these instead of comparing a kind with one engine's."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import pytest

from checkpoint.errors import CorruptFileError
from checkpoint.format import (
    HDFS_FILES,
    ROCKSDB_FILES,
    FileKind,
    UnreadableZipError,
    check_whole,
    count_records,
    read_snapshot,
    stream_records,
)
from testbed.lz4java import frame

pytestmark = pytest.mark.unit


def _int(n: int) -> bytes:
    return struct.pack(">i", n)


# One record each, then the end (a key length of -1): a put of k=v, and a removal of k.
PUT = _int(1) + b"k" + _int(1) + b"v" + _int(-1)
REMOVAL = _int(1) + b"k" + _int(-1) + _int(-1)
# A changelog that names its version (`v1`, a 2-byte length first): headerless, as a delta or a
# snapshot is read, its first four bytes would be a key length of 161,329.
VERSIONED = b"\x00\x02v1" + PUT


def _read(body: bytes):
    return io.BytesIO(frame(body)).read


def test_each_engine_has_one_base_and_one_step_and_only_a_zip_names_files() -> None:
    assert {k for k in FileKind if k.is_base} == {HDFS_FILES.base, ROCKSDB_FILES.base}
    assert {k for k in FileKind if k.is_step} == {HDFS_FILES.step, ROCKSDB_FILES.step}
    assert [k for k in FileKind if k.lists_files] == [FileKind.ZIP]


def test_records_are_read_as_the_kind_is_read() -> None:
    for kind in (FileKind.CHANGELOG, FileKind.DELTA, FileKind.SNAPSHOT):
        assert count_records(kind, _read(PUT), "lz4", "f") == 1, kind
        assert [len(runs) for runs in stream_records(kind, _read(PUT), "lz4", "f")] == [1], kind
    for kind in (FileKind.CHANGELOG, FileKind.DELTA):
        assert count_records(kind, _read(REMOVAL), "lz4", "f") == 1, kind
    # A changelog is read by its header, the HDFS-backed store's files without one.
    assert count_records(FileKind.CHANGELOG, _read(VERSIONED), "lz4", "f") == 1
    assert [len(runs) for runs in stream_records(FileKind.CHANGELOG, _read(VERSIONED), "lz4", "f")] == [1]
    for kind in (FileKind.DELTA, FileKind.SNAPSHOT):
        with pytest.raises(CorruptFileError, match="no end-of-records marker"):
            count_records(kind, _read(VERSIONED), "lz4", "f")
    # A V2 name: the changelog must lead with a version that holds its lineage.
    with pytest.raises(CorruptFileError, match="must start with its version string"):
        count_records(FileKind.CHANGELOG, _read(PUT), "lz4", "f", named_v2=True)
    # A snapshot is a base: the whole map, puts only.
    with pytest.raises(CorruptFileError, match="put record without a value"):
        count_records(FileKind.SNAPSHOT, _read(REMOVAL), "lz4", "f")
    for kind in (FileKind.ZIP, FileKind.SST, FileKind.COMMIT):
        with pytest.raises(ValueError, match=f"{kind.value} files hold no records"):
            count_records(kind, _read(PUT), "lz4", "f")
        with pytest.raises(ValueError, match=f"{kind.value} files hold no records"):
            stream_records(kind, _read(PUT), "lz4", "f")


def test_a_whole_copy_is_checked_as_its_kind_is_loaded() -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("metadata", b"v1\n{}")
    good = archive.getvalue()
    check_whole(FileKind.ZIP, io.BytesIO(good), "lz4", "1.zip")
    crc = zlib.crc32(b"v1\n{}").to_bytes(4, "little")
    bad = good.replace(crc, bytes(4))  # the entry's CRC-32, in its local header and the directory
    with pytest.raises(CorruptFileError, match="does not read back as the zip lists it"):
        check_whole(FileKind.ZIP, io.BytesIO(bad), "lz4", "1.zip")
    check_whole(FileKind.DELTA, io.BytesIO(frame(REMOVAL)), "lz4", "1.delta")
    check_whole(FileKind.CHANGELOG, io.BytesIO(frame(VERSIONED)), "lz4", "1.changelog")
    with pytest.raises(CorruptFileError, match="no end-of-records marker"):
        check_whole(FileKind.DELTA, io.BytesIO(frame(VERSIONED)), "lz4", "1.delta")
    with pytest.raises(CorruptFileError):
        check_whole(FileKind.SNAPSHOT, io.BytesIO(frame(REMOVAL)), "lz4", "1.snapshot")


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_zip_entry_spark_cannot_inflate_is_refused_before_any_is_inflated(method) -> None:
    """Java's zip reader, which Spark unpacks a snapshot with, reads stored and deflated entries.
    zipfile inflates bzip2 and LZMA a whole block at once: a 6 KB entry of bzip2 held 4 GB."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("metadata", b'v1\n{"sstFiles":[],"numKeys":0}')
        zf.writestr("MANIFEST-000005", b"\0" * 4096, compress_type=method)
    for read in (
        lambda z: check_whole(FileKind.ZIP, z, "lz4", "12.zip"),
        lambda z: read_snapshot(z, "12.zip"),
    ):
        with pytest.raises(UnreadableZipError, match=f"'MANIFEST-000005' is compressed with method {method}"):
            read(io.BytesIO(archive.getvalue()))
