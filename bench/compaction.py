"""Benchmark: recovery before and after compaction, rebuild speed, and the job's parallelism.

One process, one SparkSession (local[2]), real streaming queries:
  (a) a delta-only checkpoint (250k keys, 40 changelogs per store), the same after compaction, and
      the same inputs with snapshots that Spark wrote itself: state read at the latest batch and a
      query restart that processes one more file;
  (b) one store (a one-partition checkpoint, 1.2M records over 250k keys): our rebuild against
      Spark's own load-and-replay of the same version (a state read, session start excluded);
  (c) the job's wall time for 16 stores against the same stores rebuilt one after another.

    python -m bench.compaction [--keys 250000] [--batches 40]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from checkpoint.compaction import plan_compaction
from checkpoint.model import load_checkpoint
from checkpoint.rebuild import rebuild_store
from jobs.compact import run_compaction
from jobs.corpus import FREQUENT_SNAPSHOTS, NO_SNAPSHOTS, Scenario, aggregation
from jobs.spark_session import local_session


def _rows_for(keys: int, batches: int, per_batch: int | None = None):
    per_batch = per_batch or keys // batches * 4  # by default every key is touched about four times

    def rows(batch: int) -> list[dict]:
        return [
            {"k": f"key-{(batch * 7919 + i * 104729) % keys:07d}", "v": i % 5, "id": i}
            for i in range(per_batch)
        ]

    return rows


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _state_read(spark, path: Path, partition: int | None = None) -> float:
    def run() -> None:
        df = spark.read.format("statestore").load(str(path))
        if partition is not None:
            df = df.where(f"partition_id = {partition}")
        df.count()

    return _timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--stores", type=int, default=16, help="shuffle partitions: stores to rebuild")
    parser.add_argument("--big-records", type=int, default=1_200_000, help="records in the one-store case")
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    spark = local_session(master="local[2]", app_name="bench-compaction")
    rows = _rows_for(args.keys, args.batches)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        out = Path(tmp)
        stores = {"spark.sql.shuffle.partitions": str(args.stores)}
        delta_only = Scenario(
            "bench", "", aggregation, args.batches, {**NO_SNAPSHOTS, **stores}, inputs={"": rows}
        )
        spark_snap = Scenario(
            "bench", "", aggregation, args.batches, {**FREQUENT_SNAPSHOTS, **stores}, inputs={"": rows}
        )
        t = time.perf_counter()
        delta_only.build(spark, out / "delta")
        spark_snap.run(spark, out / "delta", out / "snap")  # the same input files
        time.sleep(3)  # the maintenance thread uploads the last snapshot
        print(f"built two checkpoints in {time.perf_counter() - t:.0f} s", flush=True)
        shutil.copytree(out / "delta" / "checkpoint", out / "compacted")
        shutil.copytree(out / "delta" / "checkpoint", out / "sequential")

        ckpt = load_checkpoint(str(out / "compacted"))
        targets, _ = plan_compaction(ckpt, quiet_seconds=0)
        started = time.perf_counter()
        per_store = run_compaction(spark, str(out / "compacted"), [t.as_key() for t in targets])
        results["job_wall_s"] = time.perf_counter() - started
        assert all(r["ok"] for r in per_store), per_store
        results["stores"] = len(per_store)
        results["rebuild_mean_s"] = sum(r["seconds"] for r in per_store) / len(per_store)
        # (c)'s baseline: the same stores rebuilt one after another in this process
        sequential = load_checkpoint(str(out / "sequential"))
        seq_targets, _ = plan_compaction(sequential, quiet_seconds=0)
        results["sequential_sum_s"] = _timed(
            lambda: [rebuild_store(sequential, t.entry) for t in seq_targets]
        )

        # (b) one big store: Spark's own load-and-replay against our rebuild of the same version
        big_rows = _rows_for(args.keys, args.batches, per_batch=args.big_records // args.batches)
        one_conf = {**NO_SNAPSHOTS, "spark.sql.shuffle.partitions": "1"}
        one = Scenario("bench-one", "", aggregation, args.batches, one_conf, inputs={"": big_rows})
        one.build(spark, out / "one")
        results["one_store_records"] = args.big_records
        results["spark_load_one_store_s"] = min(
            _state_read(spark, out / "one" / "checkpoint") for _ in range(2)
        )
        single = load_checkpoint(str(out / "one" / "checkpoint"))
        (target,) = plan_compaction(single, quiet_seconds=0)[0]
        results["rebuild_one_store_s"] = rebuild_store(single, target.entry).seconds

        # (a) recovery
        for name, path in (("delta_only", out / "delta" / "checkpoint"), ("compacted", out / "compacted"),
                           ("spark_snapshot", out / "snap")):  # fmt: skip
            results[f"read_{name}_s"] = min(_state_read(spark, path) for _ in range(2))
        extra = out / "extra"
        for name, path in (("delta_only", out / "delta" / "checkpoint"), ("compacted", out / "compacted"),
                           ("spark_snapshot", out / "snap")):  # fmt: skip
            results[f"restart_{name}_s"] = _timed(
                lambda p=path: delta_only.restart(spark, out / "delta", p, extra)
            )
    spark.stop()
    r = results
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}, indent=2))
    for what in ("read", "restart"):
        vs_spark = r[f"{what}_compacted_s"] / r[f"{what}_spark_snapshot_s"]
        vs_delta = r[f"{what}_delta_only_s"] / r[f"{what}_compacted_s"]
        print(f"(a) {what}: compacted / Spark's own snapshot = {vs_spark:.2f}; "
              f"delta-only / compacted = {vs_delta:.2f}")  # fmt: skip
    print(
        f"(b) rebuild of one store / Spark's load-and-replay of it = "
        f"{r['rebuild_one_store_s'] / r['spark_load_one_store_s']:.2f}"
    )
    parallel = r["job_wall_s"] / r["sequential_sum_s"]
    print(f"(c) job wall / the stores one after another = {parallel:.2f} ({r['stores']} stores)")


if __name__ == "__main__":
    main()
