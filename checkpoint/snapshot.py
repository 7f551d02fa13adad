"""Snapshot zips: their entries and the `metadata` entry (checkpoint-format.md §5).

SST files are never inside a zip; `metadata` names them, with the size a load checks.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from typing import IO

from .errors import CorruptFileError, UnknownFormatVersionError
from .logs import ZIP_METADATA_VERSIONS, split_versioned


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


@dataclass(frozen=True)
class Snapshot:
    entries: tuple[tuple[str, int], ...]  # (name, uncompressed size) in zip order
    metadata: SnapshotMetadata


def parse_zip_metadata(data: bytes, path: str) -> SnapshotMetadata:
    _, lines = split_versioned(data, path, ZIP_METADATA_VERSIONS)
    if not lines:
        raise CorruptFileError("zip metadata has no JSON line", path)
    try:
        body = json.loads(lines[0])
        ssts = tuple(
            SstRef(s["localFileName"], s["dfsSstFileName"], int(s["sizeBytes"])) for s in body["sstFiles"]
        )
        logs = tuple(
            SstRef(s["localFileName"], s["dfsLogFileName"], int(s["sizeBytes"]))
            for s in body.get("logFiles") or ()
        )
        return SnapshotMetadata(
            ssts,
            int(body.get("numKeys", 0)),
            int(body.get("numInternalKeys", 0)),
            {str(k): int(v) for k, v in (body.get("columnFamilyMapping") or {}).items()},
            {str(k): bool(v) for k, v in (body.get("columnFamilyTypeMap") or {}).items()},
            int(body.get("maxColumnFamilyId", 0)),
            logs,
        )
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptFileError(f"malformed zip metadata: {exc}", path) from exc


def read_snapshot(fileobj: IO[bytes], path: str) -> Snapshot:
    """Reads the central directory and the `metadata` entry only (a seekable file reads no more)."""
    try:
        with zipfile.ZipFile(fileobj) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
            if "metadata" not in names:
                raise UnreadableZipError(f"zip has no 'metadata' entry (entries: {names})", path)
            meta = parse_zip_metadata(zf.read("metadata"), path)
            return Snapshot(tuple((i.filename, i.file_size) for i in infos), meta)
    except UnknownFormatVersionError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as exc:
        raise UnreadableZipError(f"unreadable zip: {exc}", path) from exc
