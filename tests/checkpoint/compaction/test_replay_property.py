"""Property tests for the rebuild's hot path: the changelog record parser and the replay.

The oracles are deliberately naive: records encoded one by one as Spark's DataOutput writes them,
and a replay that applies them one by one. The fast parser (numpy over runs of same-shaped records)
and the rebuild's replay into RocksDB (the store's batches and the check's, onto a base, with the
merge operator's delimiter) must agree with them.
"""

from __future__ import annotations

import io
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.compaction.rebuild import Stores
from checkpoint.errors import CorruptFileError
from checkpoint.format import changelog
from checkpoint.format.changelog import check_changelog, check_records, parse_runs, records_of
from testbed.lz4java import frame, java_utf

_TYPES = {"put": 0x01, "delete": 0x10, "merge": 0x11}


def encode(records: list[tuple[str, bytes, bytes | None]], typed: bool) -> bytes:
    """Changelog records as RocksDBStateStoreChangelogWriter writes them (after the header)."""
    out = []
    for op, key, value in records:
        head = struct.pack(">i", len(key)) + key
        tail = struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
        out.append((bytes([_TYPES[op]]) if typed else b"") + head + tail)
    out.append(b"\x00" if typed else struct.pack(">i", -1))
    return b"".join(out)


def naive_replay(base: dict, changelogs: list[list[tuple]], delimiter: bytes) -> dict:
    state = dict(base)
    for records in changelogs:
        for op, key, value in records:
            if op == "put":
                state[key] = value
            elif op == "delete":
                state.pop(key, None)
            else:
                state[key] = value if key not in state else state[key] + delimiter + value
    return state


KEYS = st.sampled_from([b"", b"a", b"b", b"key-1", b"key-2", b"\x00\x01k", b"\x00\x01l", b"longer-key-9"])
VALUES = st.sampled_from([b"", b"0", b"1", b"x", b"yy", b"value-of-8"])


@st.composite
def record_lists(draw, typed: bool, keys=KEYS, values=VALUES) -> list[tuple[str, bytes, bytes | None]]:
    """Segments of records that repeat one shape (so the vectorised path is taken) mixed with
    records of varied shape (so it is tried, fails and backs off)."""
    ops = ["put", "delete", "merge"] if typed else ["put", "delete"]
    records: list[tuple[str, bytes, bytes | None]] = []
    for _ in range(draw(st.integers(0, 6))):
        op, key, value = draw(st.sampled_from(ops)), draw(keys), draw(values)
        value = None if op == "delete" else value
        if draw(st.booleans()):  # one shape, many records (the contents differ, the lengths do not)
            count = draw(st.integers(1, 300))
            fill = draw(st.integers(0, 255))
            for i in range(count):
                k = bytes((b + i + fill) % 256 for b in key)
                v = None if value is None else bytes((b + i) % 256 for b in value)
                records.append((op, k, v))
        else:
            for _ in range(draw(st.integers(1, 12))):
                op = draw(st.sampled_from(ops))
                records.append((op, draw(keys), None if op == "delete" else draw(values)))
    return records


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), typed=st.booleans())
def test_the_parser_reads_what_was_written(data, typed: bool) -> None:
    records = data.draw(record_lists(typed))
    runs = parse_runs(encode(records, typed), typed, "mem")
    assert list(records_of(runs)) == records
    assert all(a.op != b.op for a, b in zip(runs, runs[1:], strict=False))  # runs are maximal


@settings(max_examples=100, deadline=None)
@given(data=st.data(), typed=st.booleans())
def test_a_cut_or_extended_stream_is_refused(data, typed: bool) -> None:
    stream = encode(data.draw(record_lists(typed)), typed)
    cut = data.draw(st.integers(0, len(stream) - 1))
    with pytest.raises(CorruptFileError):
        parse_runs(stream[:cut], typed, "mem")
    with pytest.raises(CorruptFileError, match="after the end-of-records marker"):
        parse_runs(stream + b"\x07", typed, "mem")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), typed=st.booleans(), chunk=st.integers(1, 64))
def test_the_streaming_check_agrees_with_the_parser(data, typed: bool, chunk: int) -> None:
    """Validation's deep read checks records as they pass, `chunk` decoded bytes at a time (as
    small as one, so every field straddles a boundary): it counts what the parser reads, and
    refuses what the parser refuses."""
    stream = encode(data.draw(record_lists(typed)), typed)
    assert check_records(io.BytesIO(stream), typed, "mem", chunk) == len(
        list(records_of(parse_runs(stream, typed, "mem")))
    )
    cut = data.draw(st.integers(0, len(stream) - 1))
    with pytest.raises(CorruptFileError):
        check_records(io.BytesIO(stream[:cut]), typed, "mem", chunk)
    with pytest.raises(CorruptFileError, match="1 bytes after the end-of-records marker"):
        check_records(io.BytesIO(stream + b"\x07"), typed, "mem", chunk)


def test_the_deep_read_holds_a_chunk_not_the_changelog() -> None:
    """A 24 MB changelog (lz4 as Spark frames it) is checked while holding about one chunk: the
    records of one changelog are not what memory holds (issue 37, item 7)."""
    records = [("put", b"key-%08d" % i, bytes(200)) for i in range(100_000)]
    framed = frame(java_utf("v4") + java_utf("[]") + encode(records, True))
    tracemalloc.start()
    try:
        count = check_changelog(io.BytesIO(framed).read, "lz4", "mem", chunk=256 << 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 100_000
    decoded = len(encode(records, True))
    assert decoded > 20_000_000 and peak < 4 << 20, peak


def test_long_runs_of_one_shape_take_the_vectorised_path(monkeypatch) -> None:
    calls = []
    real = changelog._same_shape

    def counted(*args):
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(changelog, "_same_shape", counted)
    records = [("put", b"k%07d" % i, b"v%015d" % i) for i in range(10_000)]
    assert list(records_of(parse_runs(encode(records, False), False, "mem"))) == records
    assert calls == [10_000 - changelog._TRY_AFTER]  # one attempt took every record after the first few


def test_varied_records_back_off_from_the_vectorised_path(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(changelog, "_same_shape", lambda *args: calls.append(args) or 0)
    # lengths repeat in groups of five: every group would invite an attempt without the back-off
    records = [("put", b"k" * (1 + i // 5 % 7), b"v") for i in range(5_000)]
    assert list(records_of(parse_runs(encode(records, False), False, "mem"))) == records
    assert 0 < len(calls) < 10


@st.composite
def histories(draw):
    keys = st.sampled_from([b"\x00\x00a", b"\x00\x00b", b"\x00\x00c", b"\x01\x00a", b"\x01\x00d"])
    base = draw(st.dictionaries(keys, VALUES, max_size=5))
    changelogs = draw(st.lists(record_lists(True, keys=keys), max_size=6))
    return base, changelogs


def rocksdb_replay(base: dict, runs: list, delimiter: bytes, folder) -> tuple[dict, dict]:
    """What the rebuild's stores hold after `runs` on `base`: (the store's, the check's)."""
    from checkpoint.policy import POLICY
    from checkpoint.rocksdb import bulk_options, open_db, set_options

    db_dir = folder / "db"
    db_dir.mkdir()
    db = open_db(db_dir, POLICY)  # a new store, then given the rebuild's options as a base is
    db.close()
    set_options(db_dir, bulk_options(POLICY, delimiter))
    db = open_db(db_dir, POLICY)
    for key, value in base.items():
        db.put(key, value)
    db.flush()
    db.close()
    set_options(db_dir, {"memtable_factory": "{id=SkipListFactory;lookahead=0;}"})  # as for merges
    stores = Stores(folder, db_dir, True, POLICY, delimiter)
    try:
        stores.write(iter(runs))
        return dict(stores.db.items()), dict(stores.check.items())
    finally:
        stores.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), delimiter=st.sampled_from([b",", b""]))
def test_the_replay_into_rocksdb_equals_the_record_by_record_one(
    tmp_path_factory, history, delimiter
) -> None:
    base, changelogs = history
    runs = [parse_runs(encode(records, True), True, "mem") for records in changelogs]
    expected = naive_replay(base, changelogs, delimiter)
    store, check = rocksdb_replay(base, runs, delimiter, tmp_path_factory.mktemp("replay"))
    assert store == expected and check == expected
