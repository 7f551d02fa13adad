"""Benchmark and checks of `ckpt repartition`.

Default: an aggregation checkpoint of 10M keys in 4 partitions, written by a real streaming query,
taken to 16. Two identical copies in one Spark session: Spark's bare repartition of one, the
guarded flow (preflight, backup fork, digests before and after with placement, validation) of the
other. Also the profile's seconds and its predicted rows per partition under 16 against where the
rows sit after the repartition, and the driver's peak RSS.

    python -m bench.repartition [--keys 10000000] [--to 16] [--dir DIR]
    python -m bench.repartition --check                  # 4 -> 3 for every operator, restarted
    python -m bench.repartition --compat /path/to/python  # checkpoints of that python's Spark
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from checkpoint.model import load_head
from checkpoint.repartition import RepartitionOptions, head_profile, repartition_checkpoint, state_readers
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.storage import Storage
from jobs.repartition import predict, rows_per_partition, spark_engine
from jobs.spark_session import local_session, scoped_confs
from testbed.cache import MANIFEST
from testbed.copying import copy_checkpoint
from testbed.corpus import checkpoints, ensure_corpus
from testbed.generations import child_env, restart_with
from testbed.operators import OPERATOR_SCENARIOS, ensure_operator_corpus
from testbed.restart import differences, restart

# One checkpoint per operator kind that Spark's repartitioner supports, from either corpus.
OPERATORS = ("snapshots", "watermark", "dedup_agg", "join", "join_cf", "list_state", "session_window",
             "pandas_state", "every_state", "timers")  # fmt: skip
_COMPAT_SCENARIOS = ("snapshots", "watermark", "dedup_agg", "join", "list_state")


def _request(storage: Storage, trail: AuditTrail) -> InPlace:
    return InPlace(storage, taken_at_once("bench"), trail)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--to", type=int, default=16)
    parser.add_argument("--dir", type=Path, help="where to build (default: a temporary folder)")
    parser.add_argument("--check", action="store_true", help="4 -> 3 for every operator, restarted")
    parser.add_argument("--compat", metavar="PYTHON", help="a python with another PySpark: its checkpoints")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.check:
            sys.exit(check(Path(tmp), 3))
        if args.compat:
            sys.exit(compat(Path(tmp), args.compat))
        bench(Path(tmp), args.keys, args.to)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _session():
    return local_session(
        master="local[2]", app_name="ckpt-bench-repartition", extra_conf={"spark.driver.memory": "8g"}
    )


def build_aggregation(spark, out: Path, keys: int) -> Path:
    """A real streaming aggregation over `keys` distinct keys: one batch, four state partitions."""
    from pyspark.sql import functions as F

    spark.range(keys).selectExpr("concat('key-', id) as k", "id % 5 as v", "id").repartition(8).write.parquet(
        str(out / "input")
    )
    checkpoint = out / "checkpoint"
    with scoped_confs(spark, {"spark.sql.shuffle.partitions": "4"}):
        stream = spark.readStream.schema("k string, v long, id long").parquet(str(out / "input"))
        query = (
            stream.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
            .writeStream.outputMode("update").option("checkpointLocation", str(checkpoint)).format("noop")
            .trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
    return checkpoint


def bench(work: Path, keys: int, to: int) -> None:
    spark = _session()
    t = time.perf_counter()
    original = build_aggregation(spark, work / "agg", keys)
    print(f"aggregation checkpoint: {keys:,} keys in 4 partitions ({time.perf_counter() - t:.0f} s to build)")
    bare, guarded = copy_checkpoint(original, work / "bare"), copy_checkpoint(original, work / "guarded")

    t = time.perf_counter()
    profile = head_profile(load_head(str(guarded)))
    head_seconds = time.perf_counter() - t
    t = time.perf_counter()
    predicted = predict(spark, load_head(str(guarded)), [to])
    predict_seconds = time.perf_counter() - t

    t = time.perf_counter()
    spark._streamingCheckpointManager.repartition(Storage(str(bare)).spark_url, to)
    bare_seconds = time.perf_counter() - t

    storage = Storage(str(guarded))
    t = time.perf_counter()
    trail = AuditTrail(AuditTrail.default_for(storage.url))
    options = RepartitionOptions(to, spark_engine(lambda: spark), quiet_seconds=0)
    result = repartition_checkpoint(_request(storage, trail), options)
    guarded_seconds = time.perf_counter() - t

    after = load_head(str(guarded))
    reader = state_readers(after)[0]
    sits = rows_per_partition(spark, storage.spark_url, after.latest_committed_batch, reader, [to])[0]
    actual = [sits.get(p, 0) for p in range(to)]
    expected = predicted[0]["candidates"][str(to)]["rows"]
    skew_of_bytes = profile["operators"][0]["skew"]["bytes"]
    print(f"profile: head-first {head_seconds:.1f} s (skew of bytes {skew_of_bytes}); prediction for {to} "
          f"partitions {predict_seconds:.1f} s; self-check {predicted[0]['self_check']['ok']}")  # fmt: skip
    print(f"predicted rows per partition under {to} == rows after the repartition: {expected == actual}")
    print(f"  predicted {expected}\n  actual    {actual}")
    print(f"bare repartition (Spark alone): {bare_seconds:.1f} s")
    steps = json.dumps({k: round(v, 1) for k, v in result.seconds.items()})
    print(f"guarded repartition: {guarded_seconds:.1f} s; steps {steps}")
    overhead = guarded_seconds - result.seconds["rewrite"]
    print(f"overhead (preflight, backup, digests, verification) / bare rewrite: "
          f"{overhead / bare_seconds:.2f}; guarded / bare: {guarded_seconds / bare_seconds:.2f}")  # fmt: skip
    print(f"driver's Python peak RSS: {_peak_rss_mb():.0f} MB")
    spark.stop()
    if expected != actual:
        sys.exit(1)


def check(work: Path, to: int) -> int:
    """Every operator of both corpora taken 4 -> `to`, restarted against an untouched copy."""
    main_corpus, operator_corpus = ensure_corpus(), ensure_operator_corpus()
    operator_names = {s.name for s in OPERATOR_SCENARIOS}
    spark = _session()
    failed = 0
    for name in OPERATORS:
        root = operator_corpus if name in operator_names else main_corpus
        changed, untouched = (
            copy_checkpoint(root / name / "checkpoint", work / name / "changed"),
            copy_checkpoint(root / name / "checkpoint", work / name / "untouched"),
        )
        t = time.perf_counter()
        storage = Storage(str(changed))
        options = RepartitionOptions(to, spark_engine(lambda: spark), quiet_seconds=0)
        result = repartition_checkpoint(_request(storage, AuditTrail(str(work / name / "audit"))), options)
        extra = work / name / "more-input"
        diff = differences(*(restart(spark, name, root / name, p, extra) for p in (changed, untouched)))
        failed += bool(diff)
        rows = sum(s.rows for s in result.stores)
        verdict = "EQUALS" if not diff else f"DIFFERS FROM ({diff})"
        seconds = time.perf_counter() - t
        print(f"{name:15s} 4 -> {to}: {rows:5d} rows in {len(result.stores)} stores, digests equal; "
              f"the restart {verdict} the untouched copy ({seconds:.0f} s)")  # fmt: skip
    spark.stop()
    return 1 if failed else 0


def compat(work: Path, python: str) -> int:
    """Checkpoints written by `python`'s PySpark, repartitioned 4 -> 8 here, restarted under that
    PySpark and under this one, each against an untouched copy restarted the same way."""
    out = work / "written"
    subprocess.run(
        [python, "-m", "testbed.corpus", str(out), "--only", *_COMPAT_SCENARIOS], check=True, env=child_env()
    )
    version = json.loads((out / MANIFEST).read_text())["spark_version"]
    spark = _session()
    failed = 0
    for name, original in checkpoints(out).items():
        for restarted_by in (version, spark.version):
            base = work / f"{name}-{restarted_by}"
            changed, untouched = (
                copy_checkpoint(original, base / "changed"),
                copy_checkpoint(original, base / "untouched"),
            )
            storage = Storage(str(changed))
            options = RepartitionOptions(8, spark_engine(lambda: spark), quiet_seconds=0)
            repartition_checkpoint(_request(storage, AuditTrail(str(base / "audit"))), options)
            extra = base / "more-input"
            if restarted_by == spark.version:
                after = [restart(spark, name, out / name, p, extra) for p in (changed, untouched)]
            else:
                runs = [{"scenario": name, "scenario_dir": out / name, "checkpoint": p, "extra": extra}
                        for p in (changed, untouched)]  # fmt: skip
                after = restart_with(Path(python), runs, base / "restarts")
            diff = differences(*after)
            failed += bool(diff)
            verdict = "equals" if not diff else f"DIFFERS FROM ({diff})"
            print(f"{name:12s} written by Spark {version}, 4 -> 8 by Spark {spark.version}, restarted by "
                  f"Spark {restarted_by}: {verdict} the untouched copy")  # fmt: skip
            shutil.rmtree(base)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    main()
