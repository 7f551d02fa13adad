"""A corpus of checkpoints written by real PySpark streaming queries.

Every scenario reads deterministic JSON files with a file source, one file per micro-batch
(`maxFilesPerTrigger=1`, `availableNow`), so the state at any batch can be recomputed with a batch
query over the first N input files. The corpus is generated once per generator version and cached
outside the repository; tests and the demo share it.

Run `python -m jobs.corpus OUT_DIR` to generate into OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Bump whenever a scenario, its inputs or its Spark confs change: it keys the on-disk cache.
GENERATOR_VERSION = 2

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


def write_inputs(folder: Path, batches: int, rows_for: Callable[[int], list[dict]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        with open(folder / f"part-{b:05d}.json", "w") as f:
            for row in rows_for(b):
                f.write(json.dumps(row, sort_keys=True) + "\n")


INPUT_SCHEMA = "k string, v long, id long"


def _stream(spark, folder: Path):
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))


# --------------------------------------------------------------------------------------------
# Queries


def aggregation(spark, folder: Path):
    from pyspark.sql import functions as F

    return _stream(spark, folder).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def windowed_aggregation(spark, folder: Path):
    """Event time = id seconds; the watermark passes closed windows, whose state is deleted."""
    from pyspark.sql import functions as F

    events = (
        _stream(spark, folder).withColumn("ts", F.timestamp_seconds("id")).withWatermark("ts", "5 seconds")
    )
    return events.groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))


def dedup_then_aggregation(spark, folder: Path):
    from pyspark.sql import functions as F

    return _stream(spark, folder).dropDuplicates(["id"]).groupBy("k").agg(F.count("*").alias("n"))


def stream_join(spark, folder: Path):
    left = _stream(spark, folder / "left").selectExpr("k", "v as lv", "id as lid")
    right = _stream(spark, folder / "right").selectExpr("k as rk", "v as rv", "id as rid")
    return left.join(right, left.k == right.rk, "inner")


def list_state(spark, folder: Path):
    return (
        _stream(spark, folder)
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


class _Confs:
    """Sets SQL confs for one query and restores them, so scenarios do not leak into each other."""

    def __init__(self, spark, confs: dict[str, str]):
        self.spark, self.confs, self.saved = spark, confs, {}

    def __enter__(self):
        for k, v in self.confs.items():
            self.saved[k] = self.spark.conf.get(k, None)
            self.spark.conf.set(k, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                self.spark.conf.unset(k)
            else:
                self.spark.conf.set(k, v)


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


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    build: Callable[[object, Path], dict]


def _simple(
    query, batches: int, confs: dict[str, str], rows_for=_keyed_rows, foreach_batch=None, output_mode="update"
):
    def build(spark, out: Path) -> dict:
        write_inputs(out / "input", batches, rows_for)
        with _Confs(spark, confs):
            _run(query(spark, out / "input"), out / "checkpoint", output_mode, foreach_batch)
        return {"batches": batches}

    return build


def _build_join(confs: dict[str, str]):
    def build(spark, out: Path) -> dict:
        batches = 6
        write_inputs(out / "input" / "left", batches, _keyed_rows)
        write_inputs(out / "input" / "right", batches, lambda b: _keyed_rows(b, rows=8, salt=3))
        with _Confs(spark, {**FREQUENT_SNAPSHOTS, **confs}):
            _run(stream_join(spark, out / "input"), out / "checkpoint", output_mode="append")
        return {"batches": batches}

    return build


def _build_killed(spark, out: Path) -> dict:
    """SIGKILL a driver mid-batch, keep a copy, then restart the query and let it finish."""
    batches = 6
    killed = out / "killed"
    write_inputs(killed / "input", batches, _keyed_rows)
    marker = killed / "batch-running.marker"
    child = subprocess.Popen(
        [sys.executable, "-m", "jobs.corpus", "--killed-child", str(killed)],
        start_new_session=True,  # the driver's JVM is in this group: kill both at once
        stdout=subprocess.DEVNULL,
        stderr=open(killed / "child.log", "w"),
    )
    deadline = time.monotonic() + 600
    while not marker.exists():
        if child.poll() is not None:
            raise RuntimeError(
                f"killed-scenario child exited with {child.returncode}: {killed / 'child.log'}"
            )
        if time.monotonic() > deadline:
            os.killpg(child.pid, signal.SIGKILL)
            raise RuntimeError("killed-scenario child never reached the batch to kill")
        time.sleep(0.2)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    shutil.copytree(killed / "checkpoint", out / "checkpoint_before_restart")
    with _Confs(spark, NO_SNAPSHOTS):
        _run(aggregation(spark, killed / "input"), killed / "checkpoint", foreach_batch=_noop_sink)
    shutil.move(killed / "checkpoint", out / "checkpoint_after_restart")
    shutil.move(killed / "input", out / "input")
    return {"batches": batches, "killed_at_batch": KILLED_AT_BATCH}


def _killed_child(folder: Path) -> None:
    from jobs.spark_session import local_session

    spark = local_session(master="local[2]", app_name="corpus-killed-child")
    with _Confs(spark, NO_SNAPSHOTS):
        _run(
            aggregation(spark, folder / "input"),
            folder / "checkpoint",
            foreach_batch=_killing_sink(folder / "batch-running.marker"),
        )
    raise SystemExit("the killed-scenario child was not killed")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "long_chain",
        "aggregation with snapshots disabled: a delta-only chain of changelogs",
        _simple(aggregation, LONG_CHAIN_BATCHES, NO_SNAPSHOTS),
    ),
    Scenario(
        "snapshots",
        "aggregation with a snapshot every 2 deltas: zips and SSTs",
        _simple(aggregation, 12, FREQUENT_SNAPSHOTS),
    ),
    Scenario(
        "watermark",
        "windowed aggregation with a watermark: evicted windows become DELETE records",
        _simple(windowed_aggregation, 8, FREQUENT_SNAPSHOTS, output_mode="append"),
    ),
    Scenario(
        "retention",
        "minBatchesToRetain=3: Spark already pruned old logs and state files",
        _simple(aggregation, 16, {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.minBatchesToRetain": "3"}),
    ),
    Scenario(
        "killed",
        "driver SIGKILLed mid-batch: copies before and after the restart",
        _build_killed,
    ),
    Scenario(
        "zstd",
        "changelogs compressed with zstd instead of the default lz4",
        _simple(aggregation, 5, {**NO_SNAPSHOTS, "spark.sql.streaming.stateStore.compression.codec": "zstd"}),
    ),
    Scenario(
        "task_retry",
        "a task fails after its state commit and is retried: two ids for some versions",
        _simple(aggregation, 5, NO_SNAPSHOTS, foreach_batch=_retry_sink),
    ),
    Scenario(
        "two_actions",
        "foreachBatch running two actions per batch: two ids for every version",
        _simple(aggregation, 5, FREQUENT_SNAPSHOTS, foreach_batch=_two_actions_sink),
    ),
    Scenario(
        "dedup_agg",
        "dropDuplicates then aggregation: two stateful operators",
        _simple(dedup_then_aggregation, 8, FREQUENT_SNAPSHOTS, rows_for=_dedup_rows),
    ),
    Scenario(
        "join",
        "stream-stream join, state format 2: four stores per partition",
        _build_join({"spark.sql.streaming.join.stateFormatVersion": "2"}),
    ),
    Scenario(
        "join_cf",
        "stream-stream join, state format 3: column families, changelog v4",
        _build_join({"spark.sql.streaming.join.stateFormatVersion": "3"}),
    ),
    Scenario(
        "list_state",
        "transformWithStateInPandas with a ListState: column families and MERGE records",
        _simple(list_state, 6, FREQUENT_SNAPSHOTS),
    ),
    Scenario(
        "format_v1",
        "checkpoint format V1 for contrast: no ids in file names or the commit log",
        _simple(
            aggregation,
            6,
            {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.stateStore.checkpointFormatVersion": "1"},
        ),
    ),
)


def generate(out: Path, names: list[str] | None = None, log=print) -> dict:
    """Run the scenarios into `out` (which must not exist) and write its manifest last."""
    from jobs.spark_session import local_session

    out.mkdir(parents=True)
    # local[2,4]: two threads, and a failed task is retried up to 4 times (the task_retry scenario).
    spark = local_session(master="local[2,4]", app_name="ckpt-corpus")
    manifest: dict = {
        "generator_version": GENERATOR_VERSION,
        "spark_version": spark.version,
        "scenarios": {},
    }
    try:
        for scenario in SCENARIOS:
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


def default_cache_dir() -> Path:
    base = os.environ.get("CKPT_CORPUS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ckpt-maint", "corpus"
    )
    return Path(base) / f"v{GENERATOR_VERSION}"


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
    if (cache / MANIFEST).exists():
        return cache
    if cache.exists():
        log(f"corpus: removing the incomplete corpus at {cache}")
        shutil.rmtree(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log(f"corpus: generating into {cache} (generator v{GENERATOR_VERSION}); this runs real queries")
    result = subprocess.run([sys.executable, "-m", "jobs.corpus", str(cache)], check=False)
    if result.returncode != 0 or not (cache / MANIFEST).exists():
        raise RuntimeError(f"corpus generation failed (exit {result.returncode}); partial output in {cache}")
    log(f"corpus: generated in {time.monotonic() - started:.0f} s")
    return cache


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Generate the corpus of real streaming checkpoints.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--killed-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.killed_child:
        _killed_child(args.out)
        return
    generate(args.out, args.only)


if __name__ == "__main__":
    main()
