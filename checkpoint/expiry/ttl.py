"""transformWithState's state with a TTL in one RocksDB store: what has expired at a time, counted,
and taken out as Spark's own eviction takes it out at the end of a batch of that time
(`TTLState.clearExpiredStateForAllKeys`, SPARK-47558): an entry whose expiry is at or before the
batch's time goes, from its value's family and from every index that names it.

The bytes, as Spark 4.x's virtual column families lay them out (seen in the stores of the testbed's
`every_state` and `expiring` queries, and checked here on every key read: a layout that differs
refuses the store). Every key starts with its family's id (2 bytes, little-endian). A row is Spark's
UnsafeRow behind the encoding byte 0; a nested struct's slot holds its offset (high 32 bits) and
size (low 32 bits).

- A state variable with a TTL keeps `(value, expirationMs)` as each value's row: the expiry is the
  long at bytes 17..25. A ValueState's key is the grouping key's row; a MapState's is Spark's
  prefix-scan key: the length of the first part (4 bytes, little-endian), the row of the grouping
  key (one struct field), then the row of the map's key (one struct field).
- A ListState's value is its elements, each its length (4 bytes, little-endian) and the row; two
  may have the merge operator's `,` between them. A row's length is 1 plus a multiple of 8, so a
  length never begins with `,`.
- `$ttl_<name>` (the TTL index): one key per value (ValueState, MapState) or per list (its least
  expiry): Spark's range-scan key, the length of the first part (33), the row of the expiry (a
  sign marker, 1 for a positive number, then the expiry big-endian, so that keys sort by expiry),
  then the row of the element key (one struct field: the grouping key's row, or for a map a row of
  two struct fields, the grouping key and the map's key). Its value is an empty row.
- `$min_<name>`, `$count_<name>` (ListState only): the list's key, and a row of one long: its least
  expiry, and how many elements it holds.

Everything is read by iterating the families in key order (a list's three side by side), never by
lookups, and the TTL index only as far as the eviction's time. What is kept in memory is the keys
an eviction changes, for one store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from checkpoint.errors import CorruptFileError
from checkpoint.format import SnapshotMetadata

VALUE, LIST, MAP = "ValueState", "ListState", "MapState"
_EXPIRY = slice(17, 25)  # in a value's row, behind the encoding byte: (value, expirationMs)
_RANGE_PART = 33  # the expiry's part of a TTL index key: encoding byte, row of one 9-byte field
_POSITIVE = 1  # the range-scan encoder's sign marker of a number at or above zero
_DELIMITER = b","
_EMPTY_ROW = b"\x00\x01" + bytes(15)  # a TTL index entry's value: the row of one null field


@dataclass(frozen=True)
class TtlVariable:
    """A state variable with a TTL and its families' id prefixes."""

    name: str
    kind: str  # VALUE, LIST or MAP
    values: bytes
    index: bytes  # $ttl_<name>
    least: bytes | None = None  # $min_<name>, a ListState's
    count: bytes | None = None  # $count_<name>, a ListState's


@dataclass
class Expired:
    """One variable of one store at a time: its entries (values, map entries, list elements), those
    expired, and the bytes the expired take (key and value; a list element's own bytes)."""

    name: str
    kind: str
    entries: int = 0
    expired: int = 0
    expired_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Eviction:
    """What taking out the expired entries of a store writes: keys to delete, keys to put (a list's
    kept elements, its least expiry, count and index entry), and what leaves the key counts."""

    deletes: list[bytes] = field(default_factory=list)
    puts: dict[bytes, bytes] = field(default_factory=dict)
    keys_removed: int = 0
    internal_removed: int = 0


def ttl_variables(properties: dict[str, Any] | None, meta: SnapshotMetadata, where: str) -> list[TtlVariable]:
    """The store's variables with a TTL: named by the operator's metadata (`stateVariables`), their
    families' ids by the zip's mapping. A variable whose families the mapping lacks refuses."""
    declared = (properties or {}).get("stateVariables")
    if not isinstance(declared, list):
        return []
    mapping = meta.column_family_mapping

    def prefix(family: str) -> bytes:
        if family not in mapping:
            raise CorruptFileError(f"the zip's column families do not name {family!r}", where)
        return int(mapping[family]).to_bytes(2, "little")

    found = []
    for v in declared:
        if (
            not isinstance(v, dict)
            or not v.get("ttlEnabled")
            or v.get("stateVariableType") not in (VALUE, LIST, MAP)
        ):
            continue
        name, kind = str(v.get("stateName")), str(v["stateVariableType"])
        listed = kind == LIST
        found.append(TtlVariable(name, kind, prefix(name), prefix(f"$ttl_{name}"),
                                 prefix(f"$min_{name}") if listed else None,
                                 prefix(f"$count_{name}") if listed else None))  # fmt: skip
    return found


def expired_in(db, variables: list[TtlVariable], as_of: int, where: str) -> tuple[list[Expired], Eviction]:
    """Each variable's entries and those expired at `as_of` (ms since the epoch), and the eviction
    that takes them out. Every index is checked against the values it names on the way: the TTL
    index holds exactly one entry per value (per list: at its least expiry), a list's count and
    least expiry are its elements'. Anything else raises CorruptFileError: Spark keeps them so, and
    a store that differs is not one whose eviction is known."""
    eviction, counts = Eviction(), []
    for var in variables:
        counts.append(
            _lists(db, var, as_of, _due(db, var, as_of, where), eviction, where)
            if var.kind == LIST
            else _values(db, var, as_of, _due(db, var, as_of, where), eviction, where)
        )
    return counts, eviction


def _due(db, var: TtlVariable, as_of: int, where: str) -> set[bytes]:
    """The TTL index's keys at or before `as_of`: the index sorts by expiry, so it is read that far."""
    due = set()
    for key, value in _items(db, var.index):
        if _index_expiry(key, where) > as_of:
            break
        if value != _EMPTY_ROW:  # what a list's new index entry is written with
            raise CorruptFileError(f"{var.name}: a TTL index entry whose value is not the empty row", where)
        due.add(key)
    return due


def _values(db, var: TtlVariable, as_of: int, due: set[bytes], eviction: Eviction, where: str) -> Expired:
    out = Expired(var.name, var.kind)
    named = set()
    for key, value in _items(db, var.values):
        expiry = _value_expiry(value, where)
        out.entries += 1
        if expiry > as_of:
            continue
        index_key = _index_key(var, expiry, _element_key(var, key, where))
        out.expired += 1
        out.expired_bytes += len(key) + len(value)
        eviction.deletes += [key, index_key]
        named.add(index_key)
    _check_index(var, due, named, where)
    eviction.keys_removed += out.expired
    eviction.internal_removed += out.expired
    return out


def _lists(db, var: TtlVariable, as_of: int, due: set[bytes], eviction: Eviction, where: str) -> Expired:
    assert var.least is not None and var.count is not None
    out = Expired(var.name, var.kind)
    named = set()
    # A list's least expiry and count sit under its key in their own families, in the same order:
    # read beside it, not looked up (a lookup in a store with compactions off costs 100 µs).
    for (key, value), (least_key, least), (count_key, count) in _beside(
        db, (var.values, var.least, var.count), var.name, where
    ):
        element = _element_key(var, key, where)
        spans = _elements(value, where)
        expiries = [_value_expiry(value[start + 4 : end], where) for start, end, _ in spans]
        if _long(least, where) != min(expiries):
            raise CorruptFileError(f"{var.name}: a list's least expiry is not its elements'", where)
        if _long(count, where) != len(spans):
            raise CorruptFileError(f"{var.name}: a list's count is not its elements'", where)
        out.entries += len(spans)
        if min(expiries) > as_of:
            continue
        index_key = _index_key(var, min(expiries), element)
        named.add(index_key)
        keep = [e > as_of for e in expiries]
        out.expired += keep.count(False)
        out.expired_bytes += sum(end - start for (start, end, _), k in zip(spans, keep, strict=True) if not k)
        eviction.deletes.append(index_key)
        if not any(keep):
            eviction.deletes += [key, least_key, count_key]
            eviction.keys_removed += 1
            eviction.internal_removed += 3
            continue
        new_least = min(e for e in expiries if e > as_of)
        eviction.puts[key] = _joined(value, spans, keep)
        eviction.puts[least_key] = least[:9] + new_least.to_bytes(8, "little", signed=True)
        eviction.puts[count_key] = count[:9] + keep.count(True).to_bytes(8, "little", signed=True)
        eviction.puts[_index_key(var, new_least, element)] = _EMPTY_ROW
    _check_index(var, due, named, where)
    return out


def _beside(
    db, families: tuple[bytes, ...], name: str, where: str
) -> Iterator[tuple[tuple[bytes, bytes], ...]]:
    """The families' entries side by side, each under the same key: a key one lacks raises."""
    missing = (b"", b"")
    for row in zip_longest(*(_items(db, f) for f in families), fillvalue=missing):
        if len({key[2:] for key, _ in row}) != 1 or missing in row:
            raise CorruptFileError(f"{name}: a list without its least expiry or count, or the reverse", where)
        yield row


def _check_index(var: TtlVariable, due: set[bytes], named: set[bytes], where: str) -> None:
    if due != named:
        raise CorruptFileError(
            f"{var.name}: the TTL index names {len(due)} expired entries and the values {len(named)} "
            f"({len(due - named)} only in the index): not as Spark keeps them",
            where,
        )


def _items(db, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """One family's keys and values, in order."""
    it = db.iter()
    it.seek(prefix)
    while it.valid():
        key = it.key()
        if key[:2] != prefix:
            return
        yield key, it.value()
        it.next()


def _long(row: bytes, where: str) -> int:
    """The one long of an index's value row."""
    if len(row) != 17 or row[0] != 0 or row[1:9] != bytes(8):
        raise CorruptFileError("an index value that is not the row of one long", where)
    return int.from_bytes(row[9:17], "little", signed=True)


def _value_expiry(row: bytes, where: str) -> int:
    if len(row) < 25 or row[0] != 0 or row[1] & 0b10:
        raise CorruptFileError("a value with a TTL that is not the row (value, expirationMs)", where)
    return int.from_bytes(row[_EXPIRY], "little", signed=True)


def _index_expiry(key: bytes, where: str) -> int:
    head = key[2 : 2 + 4 + _RANGE_PART]
    if (
        len(key) <= 6 + _RANGE_PART
        or int.from_bytes(head[:4], "little") != _RANGE_PART
        or head[4:13] != bytes(9)
        or head[13:21] != _slot(9, 16)
        or head[21] != _POSITIVE
    ):
        raise CorruptFileError(
            "a TTL index key that is not (expirationMs, elementKey) as Spark 4 writes it", where
        )
    return int.from_bytes(head[22:30], "big", signed=True)


def _index_key(var: TtlVariable, expiry: int, element: bytes) -> bytes:
    """The TTL index's key of an element key's row at an expiry."""
    expiry_row = (
        bytes(8) + _slot(9, 16) + bytes([_POSITIVE]) + expiry.to_bytes(8, "big", signed=True) + bytes(7)
    )
    return (var.index + _RANGE_PART.to_bytes(4, "little") + b"\x00" + expiry_row
            + b"\x00" + bytes(8) + _slot(len(element), 16) + element)  # fmt: skip


def _element_key(var: TtlVariable, key: bytes, where: str) -> bytes:
    """The element key's row, as the TTL index nests it, from a value's key."""
    if var.kind != MAP:
        if len(key) < 3 or key[2] != 0:
            raise CorruptFileError(f"{var.name}: a key that is not a row behind the encoding byte", where)
        return key[3:]
    first = int.from_bytes(key[2:6], "little")
    grouping, mapped = _nested(key[6 : 6 + first], where), _nested(key[6 + first :], where)
    return bytes(8) + _slot(len(grouping), 24) + _slot(len(mapped), 24 + len(grouping)) + grouping + mapped


def _nested(encoded: bytes, where: str) -> bytes:
    """The struct of a row of one struct field, behind the encoding byte."""
    if len(encoded) < 17 or encoded[0] != 0 or encoded[1:9] != bytes(8):
        raise CorruptFileError("a key part that is not a row of one struct", where)
    slot = int.from_bytes(encoded[9:17], "little")
    start, size = 1 + (slot >> 32), slot & 0xFFFFFFFF
    if start != 17 or start + size != len(encoded):
        raise CorruptFileError("a key part whose struct is not where its slot says", where)
    return encoded[start:]


def _slot(size: int, offset: int) -> bytes:
    return ((offset << 32) | size).to_bytes(8, "little")


def _elements(value: bytes, where: str) -> list[tuple[int, int, bool]]:
    """A list's elements as (start, end, after a delimiter) spans of its value."""
    spans: list[tuple[int, int, bool]] = []
    pos = 0
    while pos < len(value):
        delimited = bool(spans) and value[pos : pos + 1] == _DELIMITER
        pos += delimited
        size = int.from_bytes(value[pos : pos + 4], "little")
        if size < 25 or size % 8 != 1 or pos + 4 + size > len(value):
            raise CorruptFileError("a list value that is not a sequence of rows", where)
        spans.append((pos, pos + 4 + size, delimited))
        pos += 4 + size
    if not spans:
        raise CorruptFileError("an empty list value", where)
    return spans


def _joined(value: bytes, spans: list[tuple[int, int, bool]], keep: list[bool]) -> bytes:
    """The kept elements in order, with the delimiter between two of them where the value had one
    anywhere between them: the grammar Spark wrote the value in, less the elements taken out."""
    out, delimited = bytearray(), False
    for (start, end, after), kept in zip(spans, keep, strict=True):
        delimited |= after
        if kept:
            out += (_DELIMITER if out and delimited else b"") + value[start:end]
            delimited = False
    return bytes(out)
