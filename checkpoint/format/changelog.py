"""Changelog files: the lineage header and the change records (docs/format.md §3).

Inside the compressed stream the data is big-endian Java DataOutput. Versions:
v1 (format V1) and v3 (format V2) are plain records; v2 and v4 add a record-type byte and column
families. v3/v4 begin with the lineage: the (version, id) pairs this changelog continues.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Literal, Protocol

from checkpoint.errors import MALFORMED, CorruptFileError, UnknownFormatVersionError
from checkpoint.format.codec import decompressing_reader

CHANGELOG_VERSIONS = (1, 2, 3, 4)
LINEAGE_HEADER_CAP = 65_535  # DataOutput.writeUTF's limit: past it the query dies at its next batch

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_VERSION_STRING = re.compile(r"^v([0-9]{1,9})\Z")

# Record types of v2/v4
EOF_RECORD, PUT_RECORD, DELETE_RECORD, MERGE_RECORD = 0x00, 0x01, 0x10, 0x11
Op = Literal["put", "delete", "merge"]
_TYPED: dict[int, Op] = {PUT_RECORD: "put", DELETE_RECORD: "delete", MERGE_RECORD: "merge"}


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


class Reader(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class ChangeRecord:
    op: Op
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


def _read_header(reader: Reader, path: str, *, named_v2: bool) -> tuple[ChangelogHeader, Reader]:
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
    except MALFORMED as exc:
        raise CorruptFileError(f"malformed lineage header: {exc}", path) from exc
    return ChangelogHeader(version, lineage, size), reader


def read_header(read, codec: str, path: str, *, named_v2: bool = True) -> ChangelogHeader:
    """The version and lineage, decompressing only the block(s) the header spans."""
    return _read_header(decompressing_reader(read, codec, path), path, named_v2=named_v2)[0]


def read_changelog(
    read, codec: str, path: str, *, named_v2: bool = True
) -> tuple[ChangelogHeader, list[ChangeRecord]]:
    """Header and every record; the whole stream is decompressed and every block checksum checked."""
    header, runs = read_changelog_runs(read, codec, path, named_v2=named_v2)
    return header, change_records(runs)


def read_changelog_runs(
    read, codec: str, path: str, *, named_v2: bool = True
) -> tuple[ChangelogHeader, list[RecordRun]]:
    """As read_changelog, with the records grouped in runs: the rebuild's hot path."""
    header, reader = _read_header(decompressing_reader(read, codec, path), path, named_v2=named_v2)
    return header, parse_runs(reader.read(-1), header.has_column_families, path)


def check_changelog(read, codec: str, path: str, *, named_v2: bool = True, chunk: int = 1 << 20) -> int:
    """Reads a whole changelog as `read_changelog` does and returns how many records it holds,
    holding at most `chunk` decoded bytes and one record's framing: validation's deep read, whose
    memory follows the work, not the file."""
    header, reader = _read_header(decompressing_reader(read, codec, path), path, named_v2=named_v2)
    return check_records(reader, header.has_column_families, path, chunk)


class _Window:
    """The decoded bytes a chunk at a time, for `check_records`: what is consumed is dropped."""

    def __init__(self, reader: Reader, path: str, chunk: int):
        self.reader, self.path, self.chunk = reader, path, chunk
        self.buf, self.pos, self.offset, self.eof = b"", 0, 0, False

    def _fill(self, n: int) -> bool:
        """Whether `n` bytes are at hand, reading chunks until they are or the stream ends."""
        while len(self.buf) - self.pos < n and not self.eof:
            more = self.reader.read(max(self.chunk, n - (len(self.buf) - self.pos)))
            self.offset += self.pos
            self.buf, self.pos = self.buf[self.pos :] + more, 0
            self.eof = not more
        return len(self.buf) - self.pos >= n

    def take(self, n: int) -> bytes:
        if not self._fill(n):
            raise CorruptFileError("truncated changelog: no end-of-records marker", self.path)
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def skip(self, n: int) -> None:
        """Passes over `n` bytes (a key or a value) without holding more than a chunk of them."""
        while n > 0:
            if not self._fill(1):
                raise CorruptFileError("truncated changelog: no end-of-records marker", self.path)
            step = min(n, len(self.buf) - self.pos)
            self.pos, n = self.pos + step, n - step

    def rest(self) -> int:
        """How many bytes are left after the end-of-records marker (reading them all)."""
        left = len(self.buf) - self.pos
        while more := self.reader.read(self.chunk):
            left += len(more)
        return left

    @property
    def at(self) -> int:
        return self.offset + self.pos


def check_state_file(read, codec: str, path: str, *, snapshot: bool, chunk: int = 1 << 20) -> int:
    """A delta or snapshot of the HDFS-backed store, as Spark writes and reads it: the records of a
    v1 changelog, with no header, compressed by the same codec and ended by a key length of -1; a
    snapshot holds puts only. Returns the record count, holding `chunk` decoded bytes at most."""
    return check_records(decompressing_reader(read, codec, path), False, path, chunk, deletes=not snapshot)


class _Counted:
    """A reader that counts the bytes it hands on."""

    def __init__(self, reader: Reader) -> None:
        self.reader, self.bytes = reader, 0

    def read(self, n: int = -1) -> bytes:
        data = self.reader.read(n)
        self.bytes += len(data)
        return data


def measure_state_file(read, codec: str, path: str, *, snapshot: bool) -> tuple[int, int]:
    """(records, decoded bytes) of an HDFS-backed delta or snapshot, checked as `check_state_file`
    checks it, holding a chunk at a time: what Spark's provider would hold of it."""
    counted = _Counted(decompressing_reader(read, codec, path))
    return check_records(counted, False, path, deletes=not snapshot), counted.bytes


def check_records(
    reader: Reader, typed: bool, path: str, chunk: int = 1 << 20, *, deletes: bool = True
) -> int:
    """The checks of `parse_runs`, record by record from a stream; returns the record count.
    Without `deletes` a record without a value is corrupt (an HDFS-backed snapshot)."""
    window, count = _Window(reader, path, chunk), 0
    while True:
        if typed:
            rtype = window.take(1)[0]
            if rtype == EOF_RECORD:
                break
            rop = _TYPED.get(rtype)
            if rop is None:
                raise CorruptFileError(f"unknown record type 0x{rtype:02x} at byte {window.at - 1}", path)
            (klen,) = _I32.unpack(window.take(4))
        else:
            (klen,) = _I32.unpack(window.take(4))
            if klen == -1:
                break
            rop = "put"
        if klen < 0:
            raise CorruptFileError(f"bad key length {klen} at byte {window.at - 4}", path)
        window.skip(klen)
        (vlen,) = _I32.unpack(window.take(4))
        if vlen == -1:
            if rop == "merge" or not deletes:
                raise CorruptFileError(f"{rop} record without a value at byte {window.at - 4}", path)
        elif vlen < 0:
            raise CorruptFileError(f"bad value length {vlen} at byte {window.at - 4}", path)
        elif rop == "delete":
            raise CorruptFileError("delete record with a value", path)
        else:
            window.skip(vlen)
        count += 1
    left = window.rest()
    if left:
        raise CorruptFileError(f"{left} bytes after the end-of-records marker", path)
    return count


@dataclass(frozen=True)
class RecordRun:
    """Consecutive records of one kind, in file order: `values` is None for deletes.

    Columns rather than a tuple per record, so that replaying a run of puts is one `dict.update`.
    """

    op: Op
    keys: list[bytes]
    values: list[bytes] | None

    @property
    def written(self) -> list[bytes]:
        """The values of a put or merge run; a delete run has none."""
        if self.values is None:
            raise ValueError(f"a {self.op} run has no values")
        return self.values


def records_of(runs: list[RecordRun]) -> Iterator[tuple[Op, bytes, bytes | None]]:
    for run in runs:
        values = run.values if run.values is not None else repeat(None)
        for key, value in zip(run.keys, values, strict=False):  # repeat(None) for deletes
            yield run.op, key, value


def change_records(runs: list[RecordRun]) -> list[ChangeRecord]:
    return [ChangeRecord(op, key, value) for op, key, value in records_of(runs)]


# A run of records whose lengths (and type) repeat is extended with numpy in one step: state rows
# of fixed-width schemas make whole changelogs of same-sized records. The attempt is made only
# after a few repeats, and backs off when it gains little, so varied records stay on the plain loop.
_TRY_AFTER, _WORTH_IT, _BACK_OFF_LIMIT = 4, 64, 1 << 12


def parse_runs(data: bytes, typed: bool, path: str) -> list[RecordRun]:
    """The records after the header, up to the end-of-records marker, which must end the data."""
    runs, pos, _ = _parse(data, typed, path)
    if pos != len(data):
        raise CorruptFileError(f"{len(data) - pos} bytes after the end-of-records marker", path)
    return runs


def _parse(data: bytes, typed: bool, path: str, upto: int | None = None) -> tuple[list[RecordRun], int, bool]:
    """The records from the start of `data`: their runs, where they end, and whether the
    end-of-records marker ended them. With `upto`, `data` is a part of the records: the parse stops
    at the first record boundary at or past `upto`, or before a record the part cuts short.

    It runs once per record of every changelog a rebuild replays, hence one flat loop.
    """
    runs: list[RecordRun] = []
    unpack, ops, head = _I32.unpack_from, _TYPED, 5 if typed else 4
    pos, end = 0, len(data)
    part, stop = upto is not None, end + 1 if upto is None else upto
    op: Op | None = None  # the current run
    keys: list[bytes] = []
    values: list[bytes] | None = None
    rop: Op | None
    shape, repeats, need = None, 0, _TRY_AFTER
    start = 0
    try:
        while pos < stop:
            start = pos
            if typed:
                rtype = data[pos]
                pos += 1
                if rtype == EOF_RECORD:
                    return runs, pos, True
                rop = ops.get(rtype)
                if rop is None:
                    raise CorruptFileError(f"unknown record type 0x{rtype:02x} at byte {pos - 1}", path)
                (klen,) = unpack(data, pos)
                pos += 4
            else:
                (klen,) = unpack(data, pos)
                pos += 4
                if klen == -1:
                    return runs, pos, True
                rop = "put"
            if klen < 0 or pos + klen + 4 > end:
                if part and klen >= 0:
                    return runs, start, False
                raise CorruptFileError(f"bad key length {klen} at byte {pos - 4}", path)
            key = data[pos : pos + klen]
            pos += klen
            (vlen,) = unpack(data, pos)
            pos += 4
            if vlen == -1:
                if rop == "merge":
                    raise CorruptFileError("merge record without a value", path)
                rop, value = "delete", None
            else:
                if vlen < 0 or pos + vlen > end:
                    if part and vlen >= 0:
                        return runs, start, False
                    raise CorruptFileError(f"bad value length {vlen} at byte {pos - 4}", path)
                if rop == "delete":
                    raise CorruptFileError("delete record with a value", path)
                value = data[pos : pos + vlen]
                pos += vlen
            if rop != op:
                op, keys, values = rop, [], None if rop == "delete" else []
                runs.append(RecordRun(rop, keys, values))
            keys.append(key)
            if values is not None and value is not None:  # a put's or merge's value: never None
                values.append(value)
            if (rop, klen, vlen) != shape:
                shape, repeats = (rop, klen, vlen), 1
                continue
            repeats += 1
            if repeats < need:
                continue
            stride = pos - start
            n = _same_shape(data, start, pos, head, klen, stride)
            if n:
                first = pos + head
                keys.extend([data[s : s + klen] for s in range(first, first + n * stride, stride)])
                if values is not None:
                    first += klen + 4
                    values.extend([data[s : s + vlen] for s in range(first, first + n * stride, stride)])
                pos += n * stride
            need = _TRY_AFTER if n >= _WORTH_IT else min(need * 4, _BACK_OFF_LIMIT)
            repeats = 0
    except (struct.error, IndexError) as exc:
        if part:
            return runs, start, False
        raise CorruptFileError("truncated changelog: no end-of-records marker", path) from exc
    return runs, pos, False


def _same_shape(data: bytes, model: int, pos: int, head: int, klen: int, stride: int) -> int:
    """How many records from `pos` on repeat the framing bytes (type, key length, value length) of
    the record at `model`, `stride` bytes apart. Record i+1 starts where record i's lengths say, so
    framing that matches at every stride is exactly what the record-by-record loop would read."""
    import numpy as np  # here: a command that reads no changelog starts 0.1 s sooner without it

    arr = np.frombuffer(data, dtype=np.uint8)
    offsets = np.r_[0:head, head + klen : head + klen + 4]
    expected = arr[model + offsets]
    limit = (len(data) - pos) // stride  # whole records only
    if limit <= 0:
        return 0
    # The records ahead as the rows of a read-only view, a record a row: no index arrays to build.
    as_strided = np.lib.stride_tricks.as_strided
    rows = as_strided(arr[pos:], shape=(limit, stride), strides=(stride, 1), writeable=False)
    count, chunk = 0, 64
    while count < limit:
        n = min(chunk, limit - count)
        same = (rows[count : count + n, offsets] == expected).all(axis=1)
        if not same.all():
            return count + int(same.argmin())
        count += n
        chunk = min(chunk * 4, 1 << 16)
    return count


def column_family_id(key: bytes) -> int:
    """Column-family stores prefix every key with a 2-byte little-endian id."""
    if len(key) < 2:
        raise ValueError("key shorter than its column-family prefix")
    return int.from_bytes(key[:2], "little")


def stream_untyped_runs(read, codec: str, path: str, chunk: int = 8 << 20) -> Iterator[list[RecordRun]]:
    """The records of a headerless changelog (format V1), delta or snapshot, a part at a time: the
    runs of the whole records in about `chunk` decoded bytes, so memory follows `chunk` and the
    largest record, not the file (a snapshot of a 10M-key store is a file of about 100 MB)."""
    return _stream_runs(decompressing_reader(read, codec, path), False, path, chunk)


def stream_changelog_runs(
    read, codec: str, path: str, chunk: int = 8 << 20, *, named_v2: bool = False
) -> Iterator[list[RecordRun]]:
    """As `stream_untyped_runs`, for a RocksDB changelog, whose version string says whether its
    records are typed (v2 and later hold column families and merge records); `named_v2`: a V2
    name (with an id), which must hold a v3/v4 changelog with its lineage."""
    header, reader = _read_header(decompressing_reader(read, codec, path), path, named_v2=named_v2)
    return _stream_runs(reader, header.has_column_families, path, chunk)


def _stream_runs(reader: Reader, typed: bool, path: str, chunk: int) -> Iterator[list[RecordRun]]:
    buf, eof, want = b"", False, chunk
    while True:
        while len(buf) < want and not eof:
            more = reader.read(max(chunk, want - len(buf)))
            eof, buf = not more, buf + more
        if eof:  # the rest: parsed as a whole file is, its end checked
            yield parse_runs(buf, typed, path)
            return
        runs, pos, last = _parse(buf, typed, path, upto=chunk)
        if last:
            if len(buf) > pos or reader.read(1):
                raise CorruptFileError("bytes after the end-of-records marker", path)
            yield runs
            return
        if pos == 0:  # one record longer than what is at hand
            want = len(buf) + chunk
            continue
        yield runs
        buf, want = buf[pos:], chunk
