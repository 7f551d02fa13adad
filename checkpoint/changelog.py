"""Changelog files: the lineage header and the change records (checkpoint-format.md §3).

Inside the compressed stream the data is big-endian Java DataOutput. Versions:
v1 (format V1) and v3 (format V2) are plain records; v2 and v4 add a record-type byte and column
families. v3/v4 begin with the lineage: the (version, id) pairs this changelog continues.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Literal

from .codec import decompressing_reader
from .errors import CorruptFileError, UnknownFormatVersionError

CHANGELOG_VERSIONS = (1, 2, 3, 4)
LINEAGE_HEADER_CAP = 65_535  # DataOutput.writeUTF's limit: past it the query dies at its next batch

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_VERSION_STRING = re.compile(r"^v(\d+)$")

# Record types of v2/v4
EOF_RECORD, PUT_RECORD, DELETE_RECORD, MERGE_RECORD = 0x00, 0x01, 0x10, 0x11
_TYPED = {PUT_RECORD: "put", DELETE_RECORD: "delete", MERGE_RECORD: "merge"}


@dataclass(frozen=True)
class LineageEntry:
    version: int
    unique_id: str


@dataclass(frozen=True)
class ChangelogHeader:
    """`lineage` is None for v1/v2, which carry none; `header_bytes` is the encoded lineage length."""

    format_version: int
    lineage: tuple[LineageEntry, ...] | None
    header_bytes: int

    @property
    def has_column_families(self) -> bool:
        return self.format_version in (2, 4)


@dataclass(frozen=True)
class ChangeRecord:
    op: Literal["put", "delete", "merge"]
    key: bytes
    value: bytes | None


def _read_exact(reader, n: int, path: str, what: str) -> bytes:
    data = reader.read(n)
    if len(data) != n:
        raise CorruptFileError(f"truncated changelog: end of data inside {what}", path)
    return data


def _read_utf(reader, path: str, what: str) -> tuple[str, int]:
    (n,) = _U16.unpack(_read_exact(reader, 2, path, what))
    raw = _read_exact(reader, n, path, what)
    try:
        # Java's modified UTF-8 equals UTF-8 for the ASCII that versions, uuids and JSON use here.
        return raw.decode("utf-8"), n
    except UnicodeDecodeError as exc:
        raise CorruptFileError(f"{what} is not valid UTF-8", path) from exc


class _Prefixed:
    """A reader with bytes pushed back in front (the v1 header probe reads what may be a record)."""

    def __init__(self, head: bytes, reader):
        self._head, self._reader = head, reader

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            out, self._head = self._head + self._reader.read(-1), b""
            return out
        if len(self._head) >= n:
            out, self._head = self._head[:n], self._head[n:]
            return out
        out = self._head + self._reader.read(n - len(self._head))
        self._head = b""
        return out


def _read_header(reader, path: str, named_v2: bool) -> tuple[ChangelogHeader, object]:
    """The header and a reader positioned at the first record.

    Spark dispatches on the first string: it names the version when it reads as `v<N>`, otherwise
    (or for an empty file) the file is v1 and the bytes read are its first record.
    """
    head = reader.read(2)
    if len(head) < 2:
        if named_v2:
            raise CorruptFileError("empty changelog (a V2 changelog starts with its version)", path)
        return ChangelogHeader(1, None, 0), _Prefixed(head, reader)
    (n,) = _U16.unpack(head)
    probe = reader.read(n) if 0 < n <= 8 else b""
    m = _VERSION_STRING.match(probe.decode("latin-1")) if len(probe) == n and n else None
    if not m:
        if named_v2:
            raise CorruptFileError("a V2 changelog must start with its version string (v3 or v4)", path)
        return ChangelogHeader(1, None, 0), _Prefixed(head + probe, reader)
    version = int(m.group(1))
    if version not in CHANGELOG_VERSIONS:
        raise UnknownFormatVersionError(path, f"v{version}", tuple(f"v{v}" for v in CHANGELOG_VERSIONS))
    if version in (1, 2):
        return ChangelogHeader(version, None, 0), reader
    text, size = _read_utf(reader, path, "the lineage header")
    try:
        raw = json.loads(text)
        lineage = tuple(LineageEntry(int(e["version"]), str(e["checkpointUniqueId"])) for e in raw)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptFileError(f"malformed lineage header: {exc}", path) from exc
    return ChangelogHeader(version, lineage, size), reader


def read_header(read, codec: str, path: str, named_v2: bool = True) -> ChangelogHeader:
    """The version and lineage, decompressing only the block(s) the header spans."""
    return _read_header(decompressing_reader(read, codec, path), path, named_v2)[0]


def read_changelog(
    read, codec: str, path: str, named_v2: bool = True
) -> tuple[ChangelogHeader, list[ChangeRecord]]:
    """Header and every record; the whole stream is decompressed and every block checksum checked."""
    header, raw = read_changelog_raw(read, codec, path, named_v2)
    return header, [ChangeRecord(op, key, value) for op, key, value in raw]  # type: ignore[arg-type]


def read_changelog_raw(
    read, codec: str, path: str, named_v2: bool = True
) -> tuple[ChangelogHeader, list[tuple[str, bytes, bytes | None]]]:
    """As read_changelog, with (op, key, value) tuples: the rebuild's hot path."""
    header, reader = _read_header(decompressing_reader(read, codec, path), path, named_v2)
    return header, parse_records(reader.read(-1), header.has_column_families, path)


def parse_records(data: bytes, typed: bool, path: str) -> list[tuple[str, bytes, bytes | None]]:
    """The records after the header, up to the end-of-records marker, which must end the data.

    One flat loop: it runs once per record of every changelog a rebuild replays.
    """
    out: list[tuple[str, bytes, bytes | None]] = []
    append, unpack, ops = out.append, _I32.unpack_from, _TYPED
    pos, end = 0, len(data)
    try:
        while True:
            if typed:
                rtype = data[pos]
                pos += 1
                if rtype == EOF_RECORD:
                    break
                op = ops.get(rtype)
                if op is None:
                    raise CorruptFileError(f"unknown record type 0x{rtype:02x} at byte {pos - 1}", path)
                (klen,) = unpack(data, pos)
                pos += 4
            else:
                (klen,) = unpack(data, pos)
                pos += 4
                if klen == -1:
                    break
                op = "put"
            if klen < 0 or pos + klen + 4 > end:
                raise CorruptFileError(f"bad key length {klen} at byte {pos - 4}", path)
            key = data[pos : pos + klen]
            pos += klen
            (vlen,) = unpack(data, pos)
            pos += 4
            if vlen == -1:
                if op == "merge":
                    raise CorruptFileError("merge record without a value", path)
                append(("delete", key, None))
                continue
            if vlen < 0 or pos + vlen > end:
                raise CorruptFileError(f"bad value length {vlen} at byte {pos - 4}", path)
            if op == "delete":
                raise CorruptFileError("delete record with a value", path)
            append((op, key, data[pos : pos + vlen]))
            pos += vlen
    except (struct.error, IndexError) as exc:
        raise CorruptFileError("truncated changelog: no end-of-records marker", path) from exc
    if pos != end:
        raise CorruptFileError(f"{end - pos} bytes after the end-of-records marker", path)
    return out


def column_family_id(key: bytes) -> int:
    """Column-family stores prefix every key with a 2-byte little-endian id."""
    if len(key) < 2:
        raise ValueError("key shorter than its column-family prefix")
    return int.from_bytes(key[:2], "little")
