"""Snapshot zips: their entries and the `metadata` entry (docs/format.md §5).

SST files are never inside a zip; `metadata` names them, with the size a load checks.
"""

from __future__ import annotations

import errno
import json
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import IO

from checkpoint.errors import MALFORMED, CorruptFileError
from checkpoint.format.layout import SST_FILE, WAL_FILE
from checkpoint.format.logs import ZIP_METADATA_VERSIONS, split_versioned

# A name in zip metadata is data, not a path (docs/safety.md): RocksDB's own file names, and Spark's
# DFS names made from them (`<local stem>-<uuid>.<ext>`, RocksDBFileManager). Anything else, a
# `../` among them, is a malformed zip: validation reports it, and no action uses the name.
_LOCAL_SST = re.compile(r"^[0-9]{1,20}\.sst\Z")
_LOCAL_LOG = re.compile(r"^[0-9]{1,20}\.log\Z")
# What zipfile raises on damaged bytes besides BadZipFile: a deflate stream that does not inflate
# (zlib.error), an unknown compression method or an encrypted entry (NotImplementedError,
# RuntimeError), a truncated entry (EOFError), bad header fields (ValueError, OverflowError).
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError, OverflowError,
              NotImplementedError, RuntimeError)  # fmt: skip


@contextmanager
def zip_damage_as(error: Callable[[BaseException], Exception]) -> Iterator[None]:
    """Raises `error(exc)` for damaged zip bytes: one of ZIP_ERRORS, or a seek before a real file's
    start that a damaged end record's offsets asked for (EINVAL; a file in memory raises ValueError
    for the same bytes). Any other OSError is the storage's, not the bytes', and passes as it is."""
    try:
        yield
    except (*ZIP_ERRORS, OSError) as exc:
        if isinstance(exc, ZIP_ERRORS) or exc.errno == errno.EINVAL:
            raise error(exc) from exc
        raise


def _unreadable(path: str) -> AbstractContextManager[None]:
    return zip_damage_as(lambda exc: UnreadableZipError(f"unreadable zip: {exc}", path))


# The metadata version a rebuilt snapshot carries: what Spark 4.1 to 4.3 write in format V2, and
# what Spark 4.0 refuses there (it writes v2). Compaction refuses a store of another generation.
WRITTEN_ZIP_METADATA_VERSION = 1

# The metadata entry lists one line per SST: far below this even for 10^5 SSTs. A larger entry (or
# one that claims to be, a zip bomb) is refused before it is read.
MAX_METADATA_BYTES = 64 << 20


class UnreadableZipError(CorruptFileError):
    """The file is not a readable zip, or has no `metadata` entry."""


@dataclass(frozen=True)
class SstRef:
    local_name: str
    dfs_name: str
    size: int


@dataclass(frozen=True)
class SnapshotMetadata:
    sst_files: tuple[SstRef, ...]
    num_keys: int
    num_internal_keys: int = 0
    column_family_mapping: dict[str, int] = field(default_factory=dict)
    column_family_type_map: dict[str, bool] = field(default_factory=dict)
    max_column_family_id: int = 0
    log_files: tuple[SstRef, ...] = ()
    version: int = 1  # the first line's: which Spark wrote it (logs.ZIP_METADATA_VERSIONS)

    @cached_property
    def _internal_by_id(self) -> dict[int, bool]:
        # Once per snapshot, not per key: a forged mapping of 10^5 families would make a scan of
        # it per key quadratic work. The mapping's ids are unique (`parse_zip_metadata`).
        return {
            i: bool(self.column_family_type_map.get(name)) for name, i in self.column_family_mapping.items()
        }

    def family_of(self, key: bytes, path: str) -> tuple[int, bool]:
        """A key's column family id (its first two bytes, little-endian, as Spark's virtual
        families prefix it) and whether the type map marks that family internal (a TTL index, a
        row counter: counted in `numInternalKeys`). A key of an id the mapping does not name
        raises CorruptFileError."""
        family = int.from_bytes(key[:2], "little")
        internal = self._internal_by_id.get(family)
        if internal is None:
            raise CorruptFileError(
                f"a key of column family id {family}, which the mapping does not name", path
            )
        return family, internal


@dataclass(frozen=True)
class Snapshot:
    entries: tuple[tuple[str, int], ...]  # (name, uncompressed size) in zip order
    metadata: SnapshotMetadata


def parse_zip_metadata(data: bytes, path: str) -> SnapshotMetadata:
    version, lines = split_versioned(data, path, ZIP_METADATA_VERSIONS)
    if not lines:
        raise CorruptFileError("zip metadata has no JSON line", path)
    try:
        body = json.loads(lines[0])
        ssts = tuple(_ref(s, "dfsSstFileName", _LOCAL_SST, SST_FILE, path) for s in body["sstFiles"])
        logs = tuple(
            _ref(s, "dfsLogFileName", _LOCAL_LOG, WAL_FILE, path) for s in body.get("logFiles") or ()
        )
        mapping = {str(k): _family_id(v) for k, v in (body.get("columnFamilyMapping") or {}).items()}
        meta = SnapshotMetadata(
            ssts,
            int(body.get("numKeys", 0)),
            int(body.get("numInternalKeys", 0)),
            mapping,
            {str(k): bool(v) for k, v in (body.get("columnFamilyTypeMap") or {}).items()},
            _family_id(body.get("maxColumnFamilyId", 0)),
            logs,
            version,
        )
    except MALFORMED as exc:
        raise CorruptFileError(f"malformed zip metadata: {exc}", path) from exc
    if len(set(mapping.values())) != len(mapping) or any(
        i > meta.max_column_family_id for i in mapping.values()
    ):
        raise CorruptFileError(
            "malformed zip metadata: column family ids repeat, or pass maxColumnFamilyId", path
        )
    return meta


# A column family's id is the 2-byte prefix of its keys, a Java short: 0 to 32767.
MAX_COLUMN_FAMILY_ID = (1 << 15) - 1


def _family_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COLUMN_FAMILY_ID:
        raise ValueError(
            f"column family id {str(value)[:20]} is not one Spark writes (0 to {MAX_COLUMN_FAMILY_ID})"
        )
    return value


def _ref(entry: dict, dfs_key: str, local: re.Pattern[str], dfs: re.Pattern[str], path: str) -> SstRef:
    ref = SstRef(entry["localFileName"], entry[dfs_key], int(entry["sizeBytes"]))
    if not isinstance(ref.local_name, str) or not local.match(ref.local_name):
        shown = str(ref.local_name)[:80]
        raise CorruptFileError(f"zip metadata names a local file {shown!r}, not a RocksDB file name", path)
    if (not isinstance(ref.dfs_name, str) or not dfs.match(ref.dfs_name)
            or ref.dfs_name.split("-", 1)[0] != ref.local_name.rsplit(".", 1)[0]):  # fmt: skip
        shown = str(ref.dfs_name)[:80]
        raise CorruptFileError(f"zip metadata names {shown!r} for {ref.local_name}: not Spark's name", path)
    if ref.size < 0:
        raise CorruptFileError(f"zip metadata gives {ref.local_name} a negative size", path)
    return ref


# What Java's zip reader, which Spark unpacks a snapshot with, reads: stored and deflated entries.
# zipfile also inflates bzip2 and LZMA, a whole compressed block at once: 6 KB of bzip2 became 2 GiB
# in memory before any size was checked.
_SPARK_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})


def _refuse_other_methods(zf: zipfile.ZipFile, path: str) -> None:
    for info in zf.infolist():
        if info.compress_type not in _SPARK_METHODS:
            raise UnreadableZipError(f"zip entry {info.filename!r} is compressed with method "
                                     f"{info.compress_type}: Spark's zip reader reads only stored and "
                                     "deflated entries", path)  # fmt: skip


def read_metadata_entry(zf: zipfile.ZipFile, path: str) -> bytes:
    """The `metadata` entry's bytes, refused above MAX_METADATA_BYTES (as the zip declares it, and
    as it inflates: zipfile stops at the declared size), and refused in a zip with an entry Spark's
    zip reader cannot read, before any is inflated."""
    _refuse_other_methods(zf, path)
    try:
        info = zf.getinfo("metadata")
    except KeyError:
        names = zf.namelist()
        shown = ", ".join(names[:8]) + (f", ... ({len(names)} entries)" if len(names) > 8 else "")
        raise UnreadableZipError(f"zip has no 'metadata' entry (entries: {shown})", path) from None
    if info.file_size > MAX_METADATA_BYTES:
        raise UnreadableZipError(f"zip metadata of {info.file_size:,} bytes: over the bound", path)
    return zf.read(info)


def check_zip(fileobj: IO[bytes], path: str) -> None:
    """Every entry of a zip read and checked against its CRC-32, as RocksDB's load unpacks them;
    a snapshot zip holds only RocksDB's small files (its SSTs live beside it)."""
    with _unreadable(path), zipfile.ZipFile(fileobj) as zf:
        _refuse_other_methods(zf, path)
        bad = zf.testzip()
    if bad is not None:  # its CRC-32, or its local header against the directory's entry
        raise UnreadableZipError(f"zip entry {bad!r} does not read back as the zip lists it", path)


def read_snapshot(fileobj: IO[bytes], path: str) -> Snapshot:
    """Reads the central directory and the `metadata` entry only (a seekable file reads no more)."""
    with _unreadable(path), zipfile.ZipFile(fileobj) as zf:
        meta = parse_zip_metadata(read_metadata_entry(zf, path), path)
        return Snapshot(tuple((i.filename, i.file_size) for i in zf.infolist()), meta)
