"""The two corpora beyond the scenarios: the rescue checkpoint (a query that dies on the lineage
header cap) and the big bases (a large snapshot and a chain over it, for the benches)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from checkpoint.format import (
    CHANGELOG_CONF,
    HDFS_PROVIDER,
    JOIN_STATE_FORMAT_CONF,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
)
from jobs.spark_session import scoped_confs
from testbed.cache import MANIFEST, corpus_base, ensure_generated
from testbed.queries import (
    FORMAT_V1,
    NO_SNAPSHOTS,
    _run,
    aggregation,
    stream_join,
    write_inputs,
)
from testbed.scenarios import Scenario

# --------------------------------------------------------------------------------------------
# The rescue checkpoint: a delta-only chain that outgrows the 65,535-byte lineage header

RESCUE_VERSION = 1
RESCUE_MAX_FILES = 1000  # the query dies before this: ~75 bytes of lineage per version


def died_on_lineage_cap(exc: BaseException) -> bool:
    """PySpark's message carries the top error only; the JVM cause chain is in its stack trace."""
    text = f"{exc} {getattr(exc, '_stackTrace', '')} {getattr(exc, '_cause', '')}"
    return "UTFDataFormatException" in text or "encoded string" in text


def _tiny_rows(batch: int) -> list[dict]:
    return [{"k": f"k{batch % 3}", "v": 1, "id": batch}]


RESCUE = Scenario(
    "rescue", "one partition, snapshots never taken: the lineage header overflows and the query dies",
    aggregation, RESCUE_MAX_FILES, {**NO_SNAPSHOTS, "spark.sql.shuffle.partitions": "1"},
    inputs={"": _tiny_rows},
)  # fmt: skip


def generate_rescue(out: Path, log=print) -> dict:
    """Runs the query until the lineage cap kills it; the failure is the point, any other is fatal."""
    from jobs.spark_session import local_session

    out.mkdir(parents=True)
    # No snapshot is ever due, so maintenance only lists the store's folder, which grows by a file a
    # batch: every 200 ms (the sessions' interval) it was a fifth of the generation's CPU.
    confs = {"spark.sql.shuffle.partitions": "1", "spark.sql.streaming.stateStore.maintenanceInterval": "60s"}
    spark = local_session(master="local[1]", app_name="ckpt-rescue", extra_conf=confs)
    started = time.monotonic()
    try:
        RESCUE.write_inputs(out, RESCUE_MAX_FILES)
        try:
            RESCUE.run(spark, out, out / "checkpoint")
        except Exception as exc:  # noqa: BLE001 - only the lineage overflow is expected
            if not died_on_lineage_cap(exc):
                raise
            log(f"corpus: rescue: the query died as expected: {type(exc).__name__}")
        else:
            raise RuntimeError("the rescue query processed every file without hitting the lineage cap")
    finally:
        spark.stop()
    facts = {"seconds": round(time.monotonic() - started, 1), "rescue_version": RESCUE_VERSION}
    (out / MANIFEST).write_text(json.dumps(facts, indent=2))
    return facts


def rescue_cache_dir() -> Path:
    return corpus_base() / f"rescue-v{RESCUE_VERSION}"


def ensure_rescue_corpus(cache: Path | None = None, log=print) -> Path:
    """The cached rescue checkpoint's scenario folder, generated in a child process when missing."""
    cache = cache or rescue_cache_dir()
    what = "the rescue checkpoint (about 900 micro-batches)"
    return ensure_generated(cache, ["-m", "testbed.corpus", "--rescue"], what, log)


# --------------------------------------------------------------------------------------------
# Big-base checkpoints: one store whose base snapshot holds many keys, then one fixed chain. Two of
# them that differ only in the base's size show what a rebuild's memory and time follow.

BIG_BASE_VERSION = 1


def _base_key(i: int) -> str:
    return f"b{i:09d}"


def big_base_chain_rows(batch: int, touch: int, records: int) -> list[dict]:
    """One changelog's input: four in five records update keys below `touch` (present in every base
    at least that large), one in five inserts a new key. The same for every base size."""
    rows = []
    for i in range(records):
        n = batch * records + i
        k = _base_key((batch * 7919 + i * 104729) % touch) if i % 5 else f"n{n:09d}"
        rows.append({"k": k, "v": n % 5, "id": n})
    return rows


def _wait_for_snapshot(checkpoint: Path, suffix: str = "zip", seconds: float = 300, stores: int = 1) -> Path:
    """The first of the base's snapshots, once Spark's maintenance uploaded one in each of `stores`."""
    deadline = time.monotonic() + seconds
    while len(found := sorted((checkpoint / "state").rglob(f"*.{suffix}"))) < stores:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Spark uploaded no snapshot of the base into {checkpoint} in {seconds:.0f} s")
        time.sleep(0.5)
    return found[0]


# The big base's state formats: the session's (RocksDB V2), and Spark's defaults. Each names the
# base's file and the confs under which Spark's maintenance writes it after batch 0: the
# HDFS-backed store snapshots a version once more than `minDeltasForSnapshot` deltas lead to it.
_SNAPSHOT_AFTER = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
BIG_BASE_FORMATS: dict[str, tuple[str, dict[str, str]]] = {
    "rocksdb_v2": ("zip", {_SNAPSHOT_AFTER: "1"}),
    "rocksdb_v1": ("zip", {**FORMAT_V1, _SNAPSHOT_AFTER: "1",
                           PROVIDER_CONF: ROCKSDB_PROVIDER, CHANGELOG_CONF: "true"}),
    "hdfs": ("snapshot", {**FORMAT_V1, _SNAPSHOT_AFTER: "0",
                          PROVIDER_CONF: HDFS_PROVIDER}),
}  # fmt: skip


def generate_big_base(
    out: Path,
    keys: int,
    touch: int,
    chain: int,
    records: int,
    state: str = "rocksdb_v2",
    log=print,
    partitions: int = 1,
) -> dict:
    """Batch 0 aggregates `keys` distinct keys and Spark snapshots it; then `chain` batches of
    `records` rows each, snapshots off, leave a chain of that many changelogs (or deltas) on top of
    it, in each of `partitions` stores. `state`: one of BIG_BASE_FORMATS."""
    from jobs.spark_session import local_session

    suffix, confs = BIG_BASE_FORMATS[state]
    out.mkdir(parents=True)
    inputs = out / "input"
    inputs.mkdir()
    started = time.monotonic()
    with open(inputs / "part-00000.json", "w") as f:  # the base: written as text, not as dicts
        for start in range(0, keys, 100_000):
            f.write("".join(f'{{"id": {i}, "k": "{_base_key(i)}", "v": {i % 5}}}\n'
                            for i in range(start, min(keys, start + 100_000))))  # fmt: skip
    shuffle = {"spark.sql.shuffle.partitions": str(partitions)}
    # The HDFS-backed store holds the map on the JVM's heap, twice while maintenance snapshots it.
    session = {**shuffle, "spark.driver.memory": "12g"} if state == "hdfs" else shuffle
    spark = local_session(master="local[2]", app_name="ckpt-big-base", extra_conf=session)
    try:
        with scoped_confs(spark, {**shuffle, **confs}):
            _run(aggregation(spark, {"": str(inputs)}), out / "checkpoint")
        base = _wait_for_snapshot(out / "checkpoint", suffix, stores=partitions)
        write_inputs(inputs, chain, lambda b: big_base_chain_rows(b, touch, records), start=1)
        with scoped_confs(spark, {**shuffle, **confs, **NO_SNAPSHOTS}):
            _run(aggregation(spark, {"": str(inputs)}), out / "checkpoint")
    finally:
        spark.stop()
    facts = {"keys": keys, "touch": touch, "chain": chain, "records_per_changelog": records,
             "base": base.name, "state": state, "partitions": partitions,
             "seconds": round(time.monotonic() - started, 1), "version": BIG_BASE_VERSION}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(facts, indent=2))
    log(f"corpus: big base of {keys:,} keys ({state}) generated in {facts['seconds']} s")
    return facts


def ensure_big_base(
    keys: int,
    touch: int,
    chain: int = 20,
    records: int = 5_000,
    cache: Path | None = None,
    log=print,
    state: str = "rocksdb_v2",
    partitions: int = 1,
) -> Path:
    """The cached big-base checkpoint's scenario folder (`checkpoint/` inside), generated in a
    child process when missing."""
    name = f"{keys}-keys-{chain}x{records}-touching-{touch}" + ("" if state == "rocksdb_v2" else f"-{state}")
    name += "" if partitions == 1 else f"-{partitions}-partitions"
    cache = cache or corpus_base() / f"big-base-v{BIG_BASE_VERSION}" / name
    args = ["--big-base", *map(str, (keys, touch, chain, records)), "--state", state]
    args += ["--partitions", str(partitions)]
    what = f"a checkpoint with a {keys:,}-key base ({state})"
    return ensure_generated(cache, ["-m", "testbed.corpus", *args], what, log)
    if cache.exists():
        shutil.rmtree(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    log(f"corpus: generating a checkpoint with a {keys:,}-key base ({state}) into {cache}")
    args = ["--big-base", *map(str, (keys, touch, chain, records)), "--state", state]
    args += ["--partitions", str(partitions)]
    result = subprocess.run([sys.executable, "-m", "testbed.corpus", str(cache), *args], check=False)
    if result.returncode != 0 or not (cache / MANIFEST).exists():
        raise RuntimeError(f"big-base generation failed (exit {result.returncode}); output in {cache}")
    return cache


LONG_CHAIN_VERSION = 1


# A long chain's stores besides BIG_BASE_FORMATS': a stream-stream join in state format 3, one store
# of column families (a chain of which needs a base: its zip names the families).
JOIN_CF = "join_cf"
LONG_CHAIN_STATES = (*sorted(BIG_BASE_FORMATS), JOIN_CF)


def _keyed_file(path: Path, first: int, last: int, prefix: str = "c") -> None:
    """Rows `first`..`last` - 1, each a key of its own, written as text, not as dicts: 10^7 rows in
    seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for start in range(first, last, 100_000):
            f.write("".join(f'{{"id": {i}, "k": "{prefix}{i:010d}", "v": {i % 5}}}\n'
                            for i in range(start, min(last, start + 100_000))))  # fmt: skip


def generate_long_chain(
    out: Path, records: int, changelogs: int, state: str = "rocksdb_v2", log=print
) -> dict:
    """A delta-only chain of one store: `changelogs` batches of `records` records each, every one
    a key of its own, as a query that dies on the lineage cap or whose snapshots never upload
    leaves it. `state`: one of BIG_BASE_FORMATS (an aggregation, no base: snapshots off from the
    first batch), or JOIN_CF: a join whose unmatched left rows are kept (two records a row, its
    count and its value) over a base of one row that Spark snapshotted."""
    from jobs.spark_session import local_session

    out.mkdir(parents=True)
    started = time.monotonic()
    one = {"spark.sql.shuffle.partitions": "1"}
    spark = local_session(
        master="local[2]", app_name="ckpt-long-chain", extra_conf={**one, "spark.driver.memory": "8g"}
    )
    try:
        if state == JOIN_CF:
            _join_cf_chain(spark, out, records, changelogs, one)
        else:
            for b in range(changelogs):
                _keyed_file(out / "input" / f"part-{b:05d}.json", b * records, (b + 1) * records)
            with scoped_confs(spark, {**one, **BIG_BASE_FORMATS[state][1], **NO_SNAPSHOTS}):
                _run(aggregation(spark, {"": str(out / "input")}), out / "checkpoint")
    finally:
        spark.stop()
    facts = {"records_per_changelog": records, "changelogs": changelogs, "state": state,
             "seconds": round(time.monotonic() - started, 1), "version": LONG_CHAIN_VERSION}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(facts, indent=2))
    log(f"corpus: a chain of {changelogs} x {records:,} records ({state}) generated in {facts['seconds']} s")
    return facts


def _join_cf_chain(spark, out: Path, records: int, changelogs: int, one: dict[str, str]) -> None:
    paths = {"left": str(out / "input" / "left"), "right": str(out / "input" / "right")}
    _keyed_file(out / "input" / "left" / "part-00000.json", 0, 1)
    _keyed_file(out / "input" / "right" / "part-00000.json", 0, 1, prefix="unmatched")
    join = {**one, JOIN_STATE_FORMAT_CONF: "3"}
    with scoped_confs(spark, {**join, "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"}):
        _run(stream_join(spark, paths), out / "checkpoint", "append")
    _wait_for_snapshot(out / "checkpoint")
    rows = records // 2
    for b in range(changelogs):
        _keyed_file(out / "input" / "left" / f"part-{b + 1:05d}.json", 1 + b * rows, 1 + (b + 1) * rows)
    with scoped_confs(spark, {**join, **NO_SNAPSHOTS}):
        _run(stream_join(spark, paths), out / "checkpoint", "append")


def ensure_long_chain(records: int, changelogs: int = 10, state: str = "rocksdb_v2", log=print) -> Path:
    """The cached long-chain checkpoint's scenario folder (`checkpoint/` inside), generated in a
    child process when missing: the rebuild's benchmark input, outside the repository."""
    name = f"{changelogs}x{records}" + ("" if state == "rocksdb_v2" else f"-{state}")
    cache = corpus_base() / f"long-chain-v{LONG_CHAIN_VERSION}" / name
    args = ["--long-chain", str(records), str(changelogs), "--state", state]
    what = f"a chain of {changelogs} x {records:,} records ({state})"
    return ensure_generated(cache, ["-m", "testbed.corpus", *args], what, log)
