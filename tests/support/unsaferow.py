"""Just enough of Spark's UnsafeRow to turn state-store bytes into the rows Spark's readers return.

Decoded values are Spark's internal ones (micros for timestamps); `schema.fromInternal` then builds
the same Python objects PySpark gives, so rows compare equal without time-zone games.
"""

from __future__ import annotations

import struct

from pyspark.sql import types as T


def decode_internal(buf: bytes, schema: T.StructType) -> tuple:
    n = len(schema.fields)
    base = ((n + 63) // 64) * 8
    out = []
    for i, field in enumerate(schema.fields):
        word = int.from_bytes(buf[(i // 64) * 8 : (i // 64) * 8 + 8], "little")
        if (word >> (i % 64)) & 1:
            out.append(None)
            continue
        slot = buf[base + 8 * i : base + 8 * i + 8]
        out.append(_value(buf, slot, field.dataType))
    return tuple(out)


def _value(buf: bytes, slot: bytes, dt: T.DataType):
    if isinstance(dt, T.NullType):
        return None
    if isinstance(dt, (T.LongType, T.TimestampType, T.TimestampNTZType)):
        return int.from_bytes(slot, "little", signed=True)
    if isinstance(dt, (T.IntegerType, T.DateType)):
        return int.from_bytes(slot[:4], "little", signed=True)
    if isinstance(dt, T.DoubleType):
        return struct.unpack("<d", slot)[0]
    if isinstance(dt, T.BooleanType):
        return slot[0] != 0
    size = int.from_bytes(slot[:4], "little")
    offset = int.from_bytes(slot[4:], "little")
    raw = buf[offset : offset + size]
    if isinstance(dt, T.StringType):
        return raw.decode("utf-8")
    if isinstance(dt, T.BinaryType):
        return bytearray(raw)
    if isinstance(dt, T.StructType):
        return decode_internal(raw, dt)
    raise NotImplementedError(f"UnsafeRow type {dt} is not needed by the corpus")


def decode_row(buf: bytes, schema: T.StructType):
    return schema.fromInternal(decode_internal(buf, schema))


def state_value_rows(value: bytes, schema: T.StructType, list_elements: bool) -> list:
    """A state-store value: one row, or for list state `[i32 LE length][row]...` elements.

    Every encoded row starts with a 1-byte encoding version (0 for UnsafeRow).
    """
    if not list_elements:
        return [decode_row(value[1:], schema)]
    rows, pos = [], 0
    while pos < len(value):
        size = int.from_bytes(value[pos : pos + 4], "little")
        rows.append(decode_row(value[pos + 5 : pos + 4 + size], schema))
        pos += 4 + size
    return rows
