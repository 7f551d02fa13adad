"""A state store's key schema file, and the one thing done to UnsafeRow bytes here: cutting a key
into two rows of its leading and trailing fields, as Spark's prefix-scan key encoder for RocksDB
does (a migration from the HDFS-backed store, which keeps session windows' keys whole).

The schema file (`state/<op>/0[/<store>]/_metadata/schema`, Spark's `SchemaV2Writer`): "v2" as
Java's `writeUTF`, then the key's and the value's schema JSON, each as a big-endian count of
chunks and the chunks as `writeUTF` (one `writeUTF` holds 65,535 bytes at most).

An UnsafeRow of n fields: a null bitset of ceil(n/64) little-endian words, one 8-byte slot per
field (a fixed-length value, or the offset of variable-length data from the row's start in the
high 32 bits and its size in the low ones), then the variable-length data, each padded with zeros
to 8 bytes. A null field's slot is zero. Nested rows and arrays are self-relative, so their bytes
move as they are.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass

from checkpoint.errors import CorruptFileError, UnknownFormatVersionError, UnsupportedLayoutError

MAX_SCHEMA_BYTES = 16 << 20

# UnsafeRow.isFixedLength: these types keep their value in the slot (as do decimals of at most
# 18 digits); strings, binaries, calendar intervals, nested types and variants keep data behind it.
# A user type is stored as its SQL type, which is not followed here: refused, as any unknown type.
_FIXED = frozenset({"null", "boolean", "byte", "short", "integer", "long", "float", "double", "date",
                    "timestamp", "timestamp_ntz"})  # fmt: skip
_ANSI_INTERVAL = re.compile(r"interval (year|month|day|hour|minute|second)( to (month|hour|minute|second))?")
_DECIMAL = re.compile(r"decimal\((\d+),\s*(-?\d+)\)")
_VARIABLE = re.compile(r"string( collate \S+)?|binary|interval|variant|char\(\d+\)|varchar\(\d+\)")


@dataclass(frozen=True)
class RowShape:
    """Which fields of a row keep their value in the slot (True) and which behind it."""

    fixed: tuple[bool, ...]

    @property
    def words(self) -> int:
        return (len(self.fixed) + 63) // 64


def read_schema_file(data: bytes, path: str) -> tuple[dict, dict]:
    """(key schema, value schema) as Spark's struct JSON."""
    if len(data) > MAX_SCHEMA_BYTES:
        raise CorruptFileError(f"a schema file of {len(data)} bytes (more than {MAX_SCHEMA_BYTES})", path)
    pos = 0

    def utf() -> str:
        nonlocal pos
        if pos + 2 > len(data):
            raise CorruptFileError("truncated schema file", path)
        (n,) = struct.unpack_from(">H", data, pos)
        raw, pos = data[pos + 2 : pos + 2 + n], pos + 2 + n
        if len(raw) != n:
            raise CorruptFileError("truncated schema file", path)
        return _modified_utf8(raw, path)

    def schema() -> dict:
        nonlocal pos
        if pos + 4 > len(data):
            raise CorruptFileError("truncated schema file", path)
        (chunks,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if not 0 < chunks <= len(data):
            raise CorruptFileError(f"a schema of {chunks} chunks", path)
        text = "".join(utf() for _ in range(chunks))
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise CorruptFileError(f"unreadable schema JSON: {exc}", path) from exc
        fields = parsed.get("fields") if isinstance(parsed, dict) else None
        if not isinstance(fields, list) or parsed.get("type") != "struct":
            raise CorruptFileError("a schema that is not a struct", path)
        return parsed

    version = utf()
    if version != "v2":
        raise UnknownFormatVersionError(path, version[:20], ("v2",))
    key, value = schema(), schema()
    if pos != len(data):
        raise CorruptFileError(f"{len(data) - pos} bytes after the value schema", path)
    return key, value


def _modified_utf8(raw: bytes, path: str) -> str:
    """Java's modified UTF-8: NUL as C0 80, characters beyond the BMP as two encoded surrogates."""
    try:
        text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        return text.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError as exc:
        raise CorruptFileError(f"unreadable schema text: {exc}", path) from exc


def row_shape(schema: dict, path: str) -> RowShape:
    """The shape of rows of a struct schema; a type this module does not know is refused."""
    fixed = []
    for field in schema["fields"]:
        kind = field.get("type") if isinstance(field, dict) else None
        if isinstance(kind, dict) and kind.get("type") in ("struct", "array", "map"):  # data behind the slot
            fixed.append(False)
        elif isinstance(kind, str) and (kind in _FIXED or _ANSI_INTERVAL.fullmatch(kind)):
            fixed.append(True)
        elif isinstance(kind, str) and (m := _DECIMAL.fullmatch(kind)):
            if int(m.group(1)) > 18:
                # Spark reserves 16 bytes behind the slot even for a null one: not cut here.
                raise UnsupportedLayoutError(f"a key field of type {kind}, wider than 18 digits", path)
            fixed.append(True)
        elif isinstance(kind, str) and _VARIABLE.fullmatch(kind):
            fixed.append(False)
        else:
            raise UnsupportedLayoutError(f"a key field of type {str(kind)[:60]!r}", path)
    return RowShape(tuple(fixed))


def split_row(row: bytes, shape: RowShape, leading: int, path: str) -> tuple[bytes, bytes]:
    """The rows of the first `leading` fields and of the others, laid out as Spark writes rows."""
    n, head = len(shape.fixed), 8 * (shape.words + len(shape.fixed))
    if len(row) < head or len(row) % 8:
        raise CorruptFileError(f"a key of {len(row)} bytes for {n} fields", path)
    bits = int.from_bytes(row[: 8 * shape.words], "little")
    leading_row = _project(row, shape, bits, head, range(leading), path)
    return leading_row, _project(row, shape, bits, head, range(leading, n), path)


def _project(row: bytes, shape: RowShape, bits: int, head: int, fields: range, path: str) -> bytes:
    words = (len(fields) + 63) // 64
    nulls, slots, data = 0, [], []
    cursor = 8 * (words + len(fields))
    base = 8 * shape.words
    for j, i in enumerate(fields):
        slot = row[base + 8 * i : base + 8 * i + 8]
        if bits >> i & 1:
            nulls |= 1 << j
            slots.append(bytes(8))
        elif shape.fixed[i]:
            slots.append(slot)
        else:
            word = int.from_bytes(slot, "little")
            offset, size = word >> 32, word & 0xFFFFFFFF
            if offset < head or offset + size > len(row):
                raise CorruptFileError(f"field {i} of a key points outside it ({offset}+{size})", path)
            padded = row[offset : offset + size] + bytes(-size % 8)
            slots.append(((cursor << 32) | size).to_bytes(8, "little"))
            data.append(padded)
            cursor += len(padded)
    return nulls.to_bytes(8 * words, "little") + b"".join(slots) + b"".join(data)
