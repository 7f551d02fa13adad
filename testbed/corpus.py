"""A corpus of checkpoints written by real PySpark streaming queries.

Every scenario reads deterministic JSON files with a file source, one file per micro-batch
(`maxFilesPerTrigger=1`, `availableNow`), so the state at any batch can be recomputed with a batch
query over the first N input files. The corpus is generated once per generator version and cached
outside the repository; tests and the demo share it.

Run `python -m testbed.corpus OUT_DIR` to generate into OUT_DIR.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from checkpoint.format.spark import (
    CHANGELOG_CONF,
    FORMAT_VERSION_CONF,
    HDFS_PROVIDER,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
)
from jobs.spark_session import scoped_confs

# Bump whenever a scenario, its inputs or its Spark confs change: it keys the on-disk cache.
GENERATOR_VERSION = 3

MANIFEST = "manifest.json"
# The driver is killed while batch KILLED_AT_BATCH runs, after its state stores committed.
KILLED_AT_BATCH = 3
# The task retry scenario fails partition 0's first attempt in these batches.
RETRY_BATCHES = (1, 3)
# Long enough to be a real delta-only chain (the issue asks for >= 30 batches).
LONG_CHAIN_BATCHES = 32


# --------------------------------------------------------------------------------------------
# Deterministic inputs


def _keyed_rows(batch: int, rows: int = 12, keys: int = 9, salt: int = 0) -> list[dict]:
    """Rows of one input file: keys repeat across batches so the state both grows and updates."""
    out = []
    for j in range(rows):
        n = batch * rows + j
        out.append({"k": f"k{(n * 7 + salt) % keys:02d}", "v": n % 5, "id": n})
    return out


def _dedup_rows(batch: int) -> list[dict]:
    # Every id appears twice across neighbouring batches: dropDuplicates drops the repeat.
    return [
        {"k": f"k{(i * 3) % 7:02d}", "v": i % 4, "id": i}
        for i in list(range(batch * 6, batch * 6 + 6)) + list(range(max(0, batch - 1) * 6, batch * 6))
    ]


def write_inputs(folder: Path, batches: int, rows_for: Callable[[int], list[dict]], start: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for b in range(start, start + batches):
        with open(folder / f"part-{b:05d}.json", "w") as f:
            for row in rows_for(b):
                f.write(json.dumps(row, sort_keys=True) + "\n")


INPUT_SCHEMA = "k string, v long, id long"


def _stream(spark, path: str, max_files: int):
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", max_files).json(path)


# --------------------------------------------------------------------------------------------
# Queries


def aggregation(spark, paths: dict[str, str], max_files: int = 1):
    from pyspark.sql import functions as F

    return (
        _stream(spark, paths[""], max_files)
        .groupBy("k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    )


def windowed_aggregation(spark, paths: dict[str, str], max_files: int = 1):
    """Event time = id seconds; the watermark passes closed windows, whose state is deleted."""
    from pyspark.sql import functions as F

    events = (
        _stream(spark, paths[""], max_files)
        .withColumn("ts", F.timestamp_seconds("id"))
        .withWatermark("ts", "5 seconds")
    )
    return events.groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))


def dedup_then_aggregation(spark, paths: dict[str, str], max_files: int = 1):
    from pyspark.sql import functions as F

    return (
        _stream(spark, paths[""], max_files).dropDuplicates(["id"]).groupBy("k").agg(F.count("*").alias("n"))
    )


def stream_join(spark, paths: dict[str, str], max_files: int = 1):
    left = _stream(spark, paths["left"], max_files).selectExpr("k", "v as lv", "id as lid")
    right = _stream(spark, paths["right"], max_files).selectExpr("k as rk", "v as rv", "id as rid")
    return left.join(right, left.k == right.rk, "inner")


def list_state(spark, paths: dict[str, str], max_files: int = 1):
    return (
        _stream(spark, paths[""], max_files)
        .groupBy("k")
        .transformWithStateInPandas(
            statefulProcessor=ListCollector(),
            outputStructType="k string, n long",
            outputMode="Update",
            timeMode="None",
        )
    )


try:  # TWS needs pandas and pyarrow on the driver; the import is cheap when they are there.
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor as _StatefulProcessor
except ImportError:  # pragma: no cover - pyspark is a hard dependency of jobs/
    _StatefulProcessor = object


class ListCollector(_StatefulProcessor):
    """transformWithStateInPandas with a ListState: appends become MERGE records in changelog v4."""

    def init(self, handle) -> None:
        from pyspark.sql.types import LongType, StructField, StructType

        self.items = handle.getListState("items", StructType([StructField("v", LongType())]))

    def handleInputRows(self, key, rows, timerValues) -> Iterator:
        import pandas as pd

        for pdf in rows:
            self.items.appendList([(int(v),) for v in pdf["v"]])
        count = sum(1 for _ in self.items.get())
        yield pd.DataFrame({"k": [key[0]], "n": [count]})

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# Running


def _run(df, checkpoint: Path, output_mode: str = "update", foreach_batch=None) -> None:
    """Run every available input file, one micro-batch each; a failing query fails generation."""
    writer = df.writeStream.outputMode(output_mode).option("checkpointLocation", str(checkpoint))
    writer = writer.foreachBatch(foreach_batch) if foreach_batch else writer.format("noop")
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:  # pragma: no cover - awaitTermination raises first
        raise RuntimeError(f"query on {checkpoint} failed: {query.exception()}")


NO_SNAPSHOTS = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "100000"}
FREQUENT_SNAPSHOTS = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}


def _noop_sink(df, batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()


def _two_actions_sink(df, batch_id: int) -> None:
    # Each action re-executes the stateful plan: every store writes this version twice, under two ids.
    df.count()
    df.write.format("noop").mode("overwrite").save()


def _fail_first_attempt(batch_id: int):
    def consume(rows):
        from pyspark import TaskContext

        list(rows)  # drain first: the state store commits when its iterator is exhausted
        ctx = TaskContext.get()
        if batch_id in RETRY_BATCHES and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            raise RuntimeError("corpus: injected failure after the state commit")

    return consume


def _retry_sink(df, batch_id: int) -> None:
    df.foreachPartition(_fail_first_attempt(batch_id))


def _killing_sink(marker: Path):
    def sink(df, batch_id: int) -> None:
        _noop_sink(df, batch_id)
        if batch_id == KILLED_AT_BATCH:
            # The batch's state is committed on every partition; the commit log is not written yet.
            marker.write_text(str(batch_id))
            time.sleep(3600)

    return sink


def _join_right_rows(batch: int) -> list[dict]:
    return _keyed_rows(batch, rows=8, salt=3)


@dataclass(frozen=True)
class Scenario:
    """A query over deterministic inputs (one file per batch), run with its confs.

    `inputs` maps a subfolder of `input/` ("" for `input/` itself) to the rows of each file.
    """

    name: str
    description: str
    query: Callable  # (spark, input folder, max files per trigger) -> streaming DataFrame
    batches: int
    confs: dict[str, str]
    inputs: dict[str, Callable[[int], list[dict]]] = field(default_factory=lambda: {"": _keyed_rows})
    output_mode: str = "update"
    sink: Callable | None = None  # a foreachBatch function; None: the noop sink

    def write_inputs(self, out: Path, batches: int, start: int = 0, folder: str = "input") -> None:
        for sub, rows_for in self.inputs.items():
            write_inputs(out / folder / sub if sub else out / folder, batches, rows_for, start)

    def paths(self, out: Path, extra: Path | None = None) -> dict[str, str]:
        """The source path of each input; with `extra`, a glob over the original folder and `extra`.

        A glob keeps Spark from pinning the source's base path, which a checkpoint copied elsewhere
        (its source log names the original files) would otherwise fail on.
        """
        paths = {}
        for sub in self.inputs:
            original = out / "input" / sub if sub else out / "input"
            if extra is None:
                paths[sub] = str(original)
            else:
                added = extra / sub if sub else extra
                paths[sub] = "/{" + str(original).lstrip("/") + "," + str(added).lstrip("/") + "}"
        return paths

    def run(self, spark, out: Path, checkpoint: Path, max_files: int = 1, sink=None, extra=None) -> None:
        with scoped_confs(spark, self.confs):
            query = self.query(spark, self.paths(out, extra), max_files)
            _run(query, checkpoint, self.output_mode, sink or self.sink)

    def build(self, spark, out: Path) -> dict:
        self.write_inputs(out, self.batches)
        self.run(spark, out, out / "checkpoint")
        return {"batches": self.batches}

    def restart(self, spark, out: Path, checkpoint: Path, extra: Path, max_files: int = 100_000) -> None:
        """Runs the query again from `checkpoint` (a copy of one of `out`'s) with one more input file.

        The original inputs stay untouched; the new file goes to `extra`. All new input is read in
        one batch, or `max_files` per batch: 1 replays the original batches that a checkpoint rolled
        back to an earlier batch has not seen, one by one as they first ran. Two copies restarted
        with the same `extra` process the same input.
        """
        for sub, rows_for in self.inputs.items():
            write_inputs(extra / sub if sub else extra, 1, rows_for, start=self.batches)
        self.run(spark, out, checkpoint, max_files=max_files, extra=extra)


class KilledScenario(Scenario):
    """SIGKILL a driver mid-batch, keep a copy, then restart the query and let it finish."""

    child_module = "testbed.corpus"  # whose `--killed-child` runs the driver that is killed

    def build(self, spark, out: Path) -> dict:
        # Nothing is moved afterwards: offset and source logs record absolute input paths.
        self.write_inputs(out, self.batches)
        live = out / "checkpoint_after_restart"
        marker = out / "batch-running.marker"
        child = subprocess.Popen(
            [sys.executable, "-m", self.child_module, "--killed-child", str(out)],
            start_new_session=True,  # the driver's JVM is in this group: kill both at once
            stdout=subprocess.DEVNULL,
            stderr=open(out / "child.log", "w"),
        )
        deadline = time.monotonic() + 600
        while not marker.exists():
            if child.poll() is not None:
                raise RuntimeError(
                    f"killed-scenario child exited with {child.returncode}: {out / 'child.log'}"
                )
            if time.monotonic() > deadline:
                os.killpg(child.pid, signal.SIGKILL)
                raise RuntimeError("killed-scenario child never reached the batch to kill")
            time.sleep(0.2)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        shutil.copytree(live, out / "checkpoint_before_restart")
        self.run(spark, out, live)
        return {"batches": self.batches, "killed_at_batch": KILLED_AT_BATCH}


def run_killed_child(folder: Path, scenario: Scenario) -> None:
    """The driver a KilledScenario kills: runs `scenario` until its sink reaches the batch to kill."""
    from jobs.spark_session import local_session

    spark = local_session(master="local[2]", app_name="corpus-killed-child")
    marker = folder / "batch-running.marker"
    scenario.run(spark, folder, folder / "checkpoint_after_restart", sink=_killing_sink(marker))
    raise SystemExit("the killed-scenario child was not killed")


JOIN_INPUTS = {"left": _keyed_rows, "right": _join_right_rows}
FORMAT_V1 = {FORMAT_VERSION_CONF: "1"}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("long_chain", "aggregation with snapshots disabled: a delta-only chain of changelogs",
             aggregation, LONG_CHAIN_BATCHES, NO_SNAPSHOTS),
    Scenario("snapshots", "aggregation with a snapshot every 2 deltas: zips and SSTs",
             aggregation, 12, FREQUENT_SNAPSHOTS),
    Scenario("watermark", "windowed aggregation with a watermark: evicted windows become DELETE records",
             windowed_aggregation, 8, FREQUENT_SNAPSHOTS, output_mode="append"),
    Scenario("retention", "minBatchesToRetain=3: Spark already pruned old logs and state files",
             aggregation, 16, {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.minBatchesToRetain": "3"}),
    KilledScenario("killed", "driver SIGKILLed mid-batch: copies before and after the restart",
                   aggregation, 6, NO_SNAPSHOTS, sink=_noop_sink),
    Scenario("zstd", "changelogs compressed with zstd instead of the default lz4",
             aggregation, 5, {**NO_SNAPSHOTS, "spark.sql.streaming.stateStore.compression.codec": "zstd"}),
    Scenario("task_retry", "a task fails after its state commit and is retried: two ids for some versions",
             aggregation, 5, NO_SNAPSHOTS, sink=_retry_sink),
    Scenario("two_actions", "foreachBatch running two actions per batch: two ids for every version",
             aggregation, 5, FREQUENT_SNAPSHOTS, sink=_two_actions_sink),
    Scenario("dedup_agg", "dropDuplicates then aggregation: two stateful operators",
             dedup_then_aggregation, 8, FREQUENT_SNAPSHOTS, inputs={"": _dedup_rows}),
    Scenario("join", "stream-stream join, state format 2: four stores per partition",
             stream_join, 6, {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.join.stateFormatVersion": "2"},
             inputs=JOIN_INPUTS, output_mode="append"),
    Scenario("join_cf", "stream-stream join, state format 3: column families, changelog v4",
             stream_join, 6, {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.join.stateFormatVersion": "3"},
             inputs=JOIN_INPUTS, output_mode="append"),
    Scenario("list_state", "transformWithStateInPandas with a ListState: column families and MERGE records",
             list_state, 6, FREQUENT_SNAPSHOTS),
    Scenario("format_v1", "checkpoint format V1 for contrast: no ids in file names or the commit log",
             aggregation, 6, {**FREQUENT_SNAPSHOTS, **FORMAT_V1}),
)  # fmt: skip


def scenario_named(name: str, scenarios: tuple[Scenario, ...] = SCENARIOS) -> Scenario:
    """The scenario that wrote a corpus checkpoint (`killed_before_restart` -> `killed`)."""
    base = name.split("_before")[0].split("_after")[0]
    for scenario in scenarios:
        if scenario.name == base:
            return scenario
    raise KeyError(name)


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
    return default_cache_dir().parent / f"rescue-v{RESCUE_VERSION}"


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
    cache = cache or default_cache_dir().parent / f"big-base-v{BIG_BASE_VERSION}" / name
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


def generate(
    out: Path,
    names: list[str] | None = None,
    log=print,
    scenarios: tuple[Scenario, ...] | None = None,
    version: int = GENERATOR_VERSION,
) -> dict:
    """Run the scenarios into `out` (which must not exist) and write its manifest last."""
    from jobs.spark_session import local_session

    out.mkdir(parents=True)
    # local[2,4]: two threads, and a failed task is retried up to 4 times (the task_retry scenario).
    spark = local_session(master="local[2,4]", app_name="ckpt-corpus")
    manifest: dict = {
        "generator_version": version,
        "spark_version": spark.version,
        "scenarios": {},
    }
    try:
        for scenario in SCENARIOS if scenarios is None else scenarios:
            if names and scenario.name not in names:
                continue
            started = time.monotonic()
            log(f"corpus: {scenario.name}: {scenario.description} ...")
            facts = scenario.build(spark, out / scenario.name)
            facts["seconds"] = round(time.monotonic() - started, 1)
            facts["description"] = scenario.description
            manifest["scenarios"][scenario.name] = facts
            log(f"corpus: {scenario.name}: done in {facts['seconds']} s")
    finally:
        spark.stop()
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def checkpoints(root: Path) -> dict[str, Path]:
    """Every checkpoint folder of a generated corpus, by name (`killed` gives two)."""
    found = {}
    for scenario in sorted(p for p in root.iterdir() if p.is_dir()):
        for ckpt in sorted(scenario.glob("checkpoint*")):
            suffix = ckpt.name[len("checkpoint") :]
            found[scenario.name + suffix] = ckpt
    return found


def cache_home() -> Path:
    """`~/.cache/ckpt-maint` (XDG_CACHE_HOME honoured): the corpora and the tests' jars."""
    return Path(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))) / "ckpt-maint"


def corpus_base() -> Path:
    """Where the corpora's versions live; CKPT_CORPUS_CACHE moves it."""
    return Path(os.environ.get("CKPT_CORPUS_CACHE") or cache_home() / "corpus")


def default_cache_dir() -> Path:
    return corpus_base() / f"v{GENERATOR_VERSION}"


def _prune_older_generations(cache: Path) -> None:
    """Corpora of older generator versions are never read again; each holds real queries' output."""
    if not cache.parent.is_dir():
        return
    for old in cache.parent.glob("v*"):
        if old != cache and old.name[1:].isdigit() and int(old.name[1:]) < GENERATOR_VERSION:
            shutil.rmtree(old, ignore_errors=True)


def ensure_corpus(cache: Path | None = None, log=print) -> Path:
    """The cached corpus, generated in a child process first when it is missing.

    A child process keeps the generator's SparkContext (local[2,4], its own maintenance thread)
    apart from the caller's. The corpus is generated in place, never moved: operator metadata v2
    records absolute schema file paths. The manifest is written last and marks it complete.
    """
    if cache is None:
        cache = default_cache_dir()
        _prune_older_generations(cache)
    return ensure_generated(
        cache, ["-m", "testbed.corpus"], f"the corpus (generator v{GENERATOR_VERSION})", log
    )


@contextmanager
def cache_lock(target: Path) -> Iterator[None]:
    """Held while `target` is filled: test workers (pytest-xdist) and concurrent runs on one cache
    wait for the first to finish, then find its output, instead of writing over each other."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_generated(cache: Path, command: list[str], what: str, log=print) -> Path:
    """`cache`, generated first by `python <command> <cache>` in a child process when it has no
    manifest (an incomplete one is removed first); the child writes the manifest last."""
    if (cache / MANIFEST).exists():
        return cache
    with cache_lock(cache):
        if (cache / MANIFEST).exists():  # another process generated it while this one waited
            return cache
        if cache.exists():
            log(f"corpus: removing the incomplete corpus at {cache}")
            shutil.rmtree(cache)
        started = time.monotonic()
        log(f"corpus: generating {what} into {cache}")
        result = subprocess.run([sys.executable, *command, str(cache)], check=False)
        if result.returncode != 0 or not (cache / MANIFEST).exists():
            raise RuntimeError(f"generating {what} failed (exit {result.returncode}); output in {cache}")
        log(f"corpus: {what} generated in {time.monotonic() - started:.0f} s")
    return cache


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Generate the corpus of real streaming checkpoints.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--killed-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rescue", action="store_true", help="generate the lineage-overflow checkpoint only")
    parser.add_argument("--big-base", nargs=4, type=int, metavar=("KEYS", "TOUCH", "CHAIN", "RECORDS"),
                        help="generate one big-base checkpoint only")  # fmt: skip
    parser.add_argument("--state", default="rocksdb_v2", choices=sorted(BIG_BASE_FORMATS),
                        help="the big base's state format")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=1, help="the big base's partitions")
    args = parser.parse_args(argv)
    if args.killed_child:
        run_killed_child(args.out, scenario_named(args.out.name))
        return
    if args.rescue:
        generate_rescue(args.out)
        return
    if args.big_base:
        generate_big_base(args.out, *args.big_base, state=args.state, partitions=args.partitions)
        return
    generate(args.out, args.only)


if __name__ == "__main__":
    main()
