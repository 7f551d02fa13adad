"""The key schema file and the cut of a key row (`checkpoint.format.unsaferow`). Real keys and
schema files are compared with RocksDB's in tests/checkpoint/migrate/test_migrate.py; here, the
edges: nulls, empty strings, hostile offsets, and every way a schema file can be wrong."""

from __future__ import annotations

import json
import struct

import pytest

from checkpoint.errors import CorruptFileError, UnknownFormatVersionError, UnsupportedLayoutError
from checkpoint.format.unsaferow import RowShape, read_schema_file, row_shape, split_row

SESSION_KEY = {"type": "struct", "fields": [
    {"name": "k", "type": "string", "nullable": True, "metadata": {}},
    {"name": "sessionStartTime", "type": "timestamp", "nullable": True, "metadata": {}},
]}  # fmt: skip


def _utf(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def schema_file(key: object, value: object, version: str = "v2", chunk: int = 65_535) -> bytes:
    out = _utf(version)
    for part in (json.dumps(key), json.dumps(value)):
        pieces = [part[i : i + chunk] for i in range(0, len(part), chunk)]
        out += struct.pack(">i", len(pieces)) + b"".join(_utf(p) for p in pieces)
    return out


def _row(*fields: tuple[str, object]) -> bytes:
    """An UnsafeRow of ("long", int), ("string", str) and ("null", None) fields."""
    head = 8 + 8 * len(fields)
    nulls, slots, data = 0, b"", b""
    for i, (kind, value) in enumerate(fields):
        if value is None:
            nulls |= 1 << i
            slots += bytes(8)
        elif kind == "long":
            slots += struct.pack("<q", value)
        else:
            raw = str(value).encode()
            slots += struct.pack("<Q", ((head + len(data)) << 32) | len(raw))
            data += raw + bytes(-len(raw) % 8)
    return struct.pack("<Q", nulls) + slots + data


def test_a_schema_file_reads_in_chunks_and_gives_the_key_shape() -> None:
    value = {"type": "struct", "fields": [{"name": "w", "type": {"type": "struct", "fields": []}},
                                          {"name": "n", "type": "decimal(18,2)"}]}  # fmt: skip
    key, got = read_schema_file(schema_file(SESSION_KEY, value, chunk=40), "schema")
    assert (key, got) == (SESSION_KEY, value)
    assert row_shape(key, "schema") == RowShape((False, True))
    assert row_shape(value, "schema") == RowShape((False, True))


@pytest.mark.parametrize(
    ("data", "error", "words"),
    [
        (schema_file(SESSION_KEY, SESSION_KEY, version="v3"), UnknownFormatVersionError, "unknown format"),
        (schema_file(SESSION_KEY, SESSION_KEY)[:-3], CorruptFileError, "truncated"),
        (schema_file(SESSION_KEY, SESSION_KEY) + b"\0", CorruptFileError, "after the value schema"),
        (schema_file([1, 2], SESSION_KEY), CorruptFileError, "not a struct"),
        (_utf("v2") + struct.pack(">i", 1 << 30), CorruptFileError, "chunks"),
        (_utf("v2") + struct.pack(">i", 1) + _utf("{nope"), CorruptFileError, "unreadable schema JSON"),
        (b"\0" * ((16 << 20) + 1), CorruptFileError, "more than"),
    ],
)
def test_a_bad_schema_file_is_refused_in_one_line(data: bytes, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        read_schema_file(data, "schema")


@pytest.mark.parametrize("kind", ["decimal(20,2)", "geometry", {"nope": 1}, None])
def test_a_key_type_that_is_not_known_to_be_cut_right_is_refused(kind: object) -> None:
    with pytest.raises(UnsupportedLayoutError):
        row_shape({"type": "struct", "fields": [{"name": "x", "type": kind}]}, "schema")


def test_a_key_is_cut_into_rows_spark_would_write_for_its_parts() -> None:
    shape = RowShape((False, True, False))
    key = _row(("string", "user-1"), ("long", 7), ("string", ""))
    assert split_row(key, shape, 1, "k") == (_row(("string", "user-1")), _row(("long", 7), ("string", "")))
    with_nulls = _row(("string", None), ("long", None), ("string", "x" * 9))
    assert split_row(with_nulls, shape, 2, "k") == (_row(("string", None), ("long", None)),
                                                    _row(("string", "x" * 9)))  # fmt: skip


@pytest.mark.parametrize("damage", ["short", "unaligned", "outside", "inside_the_slots"])
def test_a_key_whose_bytes_do_not_hold_its_fields_is_refused(damage: str) -> None:
    key = bytearray(_row(("string", "abc"), ("long", 1)))
    if damage == "short":
        key = key[:16]
    elif damage == "unaligned":
        key += b"\0"
    else:
        offset = 1 << 20 if damage == "outside" else 8
        key[8:16] = struct.pack("<Q", (offset << 32) | 3)
    with pytest.raises(CorruptFileError):
        split_row(bytes(key), RowShape((False, True)), 1, "k")
