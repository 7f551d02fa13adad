"""Benchmark: recovery before and after compaction, rebuild speed, and the job's parallelism.

One process, one SparkSession (local[2]), real streaming queries:
  (a) a delta-only checkpoint (250k keys, 40 changelogs per store), the same after compaction, and
      the same inputs with snapshots that Spark wrote itself: state read at the latest batch and a
      query restart that processes one more file;
  (b) one store (a one-partition checkpoint, 1.2M records) per shape of key space and chain
      length: our rebuild against Spark's own load-and-replay of the same version (a state read,
      session start excluded). The rebuild's cost grows with the distinct keys, Spark's with the
      records, so the shapes differ; the first is the one the rebuild notes (docs/compaction.md) measured;
  (c) the job's wall time for 16 stores against the same stores rebuilt one after another;
  (d) one store per base size (1M, 3M, 10M keys, written by PySpark, cached outside the repo) with
      the same 20-changelog chain on top: our rebuild in a fresh process (its peak RSS and seconds)
      against Spark's own load-and-replay of the same version (a state read at the latest batch);
  (e) one store's delta-only chain of 10 changelogs, every record a key of its own (10^6 and 10^7
      records, written by PySpark, cached outside the repo), in format V2 and V1 (an aggregation,
      no base) and in a store of column families (a join in state format 3, on a base of one row):
      our rebuild in a fresh process (its peak RSS and seconds) against Spark's load-and-replay of
      the same version.
      Memory must not follow the chain: peak RSS x1.25 at most from the short chain to the long one.

    python -m bench.compaction [--parts abcd] [--keys 250000] [--batches 40] [--shapes 750000x30,...]
        [--big-bases 1000000,3000000,10000000]
    python -m bench.compaction --parts e [--chains 100000,1000000]
        [--chain-states rocksdb_v2,rocksdb_v1,join_cf]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from checkpoint.compaction import CompactionPlanOptions, plan_compaction, rebuild_store, tasks_for
from checkpoint.model import load_checkpoint
from jobs.compact import run_compaction_tasks
from jobs.spark_session import local_session
from testbed.copying import copy_checkpoint
from testbed.generators import ensure_big_base, ensure_long_chain
from testbed.queries import FREQUENT_SNAPSHOTS, NO_SNAPSHOTS, aggregation
from testbed.scenarios import Scenario


def _rows_for(keys: int, batches: int, per_batch: int | None = None):
    per_batch = per_batch or keys // batches * 4  # by default every key is touched about four times

    def rows(batch: int) -> list[dict]:
        return [
            {"k": f"key-{(batch * 7919 + i * 104729) % keys:07d}", "v": i % 5, "id": i}
            for i in range(per_batch)
        ]

    return rows


def _shapes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(n) for n in part.split("x")) for part in text.split(",")]  # type: ignore[misc]


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _state_read(
    spark, path: Path, partition: int | None = None, options: dict[str, str] | None = None
) -> float:
    def run() -> None:
        df = spark.read.format("statestore").options(**(options or {})).load(str(path))
        if partition is not None:
            df = df.where(f"partition_id = {partition}")
        df.count()

    return _timed(run)


def _import_the_rebuild(_) -> int:
    import checkpoint.compaction  # noqa: F401 - the rebuild with it

    return 0


def _rebuild_one_store(checkpoint: Path, copy: Path):
    shutil.copytree(checkpoint, copy)
    return _rebuild_one_store_in_place(str(copy))


BIG_TOUCH = 500_000  # (d)'s chain updates keys below this: present in every base


def _rebuild_in_a_fresh_process(checkpoint: Path, copy: Path) -> dict:
    """(d), (e): a new interpreter per rebuild, so its peak RSS is this rebuild's and nothing else's."""
    copy_checkpoint(checkpoint, copy)  # a copy that names itself (a column-family store's schema paths)
    code = ("import json, sys; from bench.compaction import _rebuild_one_store_in_place as r; "
            "print(json.dumps(r(sys.argv[1]).as_dict()))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rebuild_one_store_in_place(path: str):
    ckpt = load_checkpoint(path)
    (target,) = plan_compaction(ckpt, CompactionPlanOptions(quiet_seconds=0)).targets
    return rebuild_store(ckpt, target.entry)


def _big_bases(spark, sizes: list[int], out: Path) -> list[dict]:
    rows = []
    for keys in sizes:
        checkpoint = ensure_big_base(keys, BIG_TOUCH) / "checkpoint"
        best, peak, spark_s = _best_of_two(spark, checkpoint, out / f"big-{keys}")
        rows.append({
            "base_keys": keys, "keys": best["keys"], "records": best["records"],
            "touched_keys": best["touched_keys"], "bytes_read": best["bytes_read"],
            "rebuild_s": best["seconds"], "peak_rss_mb": round(peak / 2**20),
            "spark_s": round(spark_s, 3), "ratio": round(best["seconds"] / spark_s, 3),
        })  # fmt: skip
        print(f"(d) {rows[-1]}", flush=True)
    return rows


def _best_of_two(spark, checkpoint: Path, copies: Path, options: dict[str, str] | None = None):
    """(d), (e): (the faster of two rebuilds in fresh processes, the larger peak RSS of the two,
    Spark's faster of two load-and-replays of the same version)."""
    spark_s = min(_state_read(spark, checkpoint, options=options) for _ in range(2))
    runs = [_rebuild_in_a_fresh_process(checkpoint, copies.with_name(f"{copies.name}-{i}")) for i in range(2)]
    for i in range(2):
        shutil.rmtree(copies.with_name(f"{copies.name}-{i}"))
    return min(runs, key=lambda r: r["seconds"]), max(r["peak_rss_bytes"] for r in runs), spark_s


def _long_chains(spark, per_changelog: list[int], states: list[str], out: Path) -> list[dict]:
    rows = []
    for state in states:
        for records in per_changelog:
            checkpoint = ensure_long_chain(records, 10, state) / "checkpoint"
            # A join's store is read a side at a time; either side's read loads (replays) all of it.
            options = {"joinSide": "left"} if state == "join_cf" else {}
            best, peak, spark_s = _best_of_two(spark, checkpoint, out / f"chain-{records}", options)
            rows.append({
                "state": state, "records": best["records"], "keys": best["keys"],
                "rebuild_s": best["seconds"], "peak_rss_mb": round(peak / 2**20),
                "spark_s": round(spark_s, 3), "ratio": round(best["seconds"] / spark_s, 3),
            })  # fmt: skip
            print(f"(e) {rows[-1]}", flush=True)
    return rows


def _print_chains(chains: list[dict]) -> None:
    for row in chains:
        print(f"(e) {row['state']}: a chain of {row['records']:,} records: rebuild {row['rebuild_s']} s, "
              f"peak RSS {row['peak_rss_mb']} MB; Spark's load-and-replay {row['spark_s']} s; "
              f"rebuild / Spark = {row['ratio']:.2f}")  # fmt: skip
    for state in dict.fromkeys(r["state"] for r in chains):
        mine = [r for r in chains if r["state"] == state]
        if len(mine) > 1:
            print(f"(e) {state}: from {mine[0]['records']:,} to {mine[-1]['records']:,} records: peak RSS "
                  f"x{mine[-1]['peak_rss_mb'] / mine[0]['peak_rss_mb']:.2f}, rebuild seconds "
                  f"x{mine[-1]['rebuild_s'] / mine[0]['rebuild_s']:.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--stores", type=int, default=16, help="shuffle partitions: stores to rebuild")
    parser.add_argument("--big-records", type=int, default=1_200_000, help="records in the one-store case")
    parser.add_argument(
        "--shapes",
        type=_shapes,
        default=_shapes("750000x30,250000x40,1000000x40"),
        help="(b)'s one-store cases as KEYSxCHANGELOGS; the first is the shape the rebuild notes measured",
    )
    parser.add_argument(
        "--big-bases",
        type=lambda t: [int(n) for n in t.split(",")],
        default=[1_000_000, 3_000_000, 10_000_000],
        help="(d)'s base sizes in keys",
    )
    parser.add_argument(
        "--chains",
        type=lambda t: [int(n) for n in t.split(",")],
        default=[100_000, 1_000_000],
        help="(e)'s records per changelog (10 changelogs)",
    )
    parser.add_argument(
        "--chain-states", type=lambda t: t.split(","), default=["rocksdb_v2", "rocksdb_v1", "join_cf"]
    )
    parser.add_argument("--parts", choices=("abcd", "abc", "d", "e"), default="abcd",
                        help="(a)-(c) share inputs")  # fmt: skip
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.parts == "e":
        spark = local_session(master="local[2]", app_name="bench-compaction")
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            chains = _long_chains(spark, args.chains, args.chain_states, Path(tmp))
        spark.stop()
        _print_chains(chains)
        return
    if set(args.parts) == {"d"}:  # (d) alone needs none of the shared inputs
        spark = local_session(master="local[2]", app_name="bench-compaction")
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            big = _big_bases(spark, args.big_bases, Path(tmp))
        spark.stop()
        _print_big(big)
        return
    spark = local_session(master="local[2]", app_name="bench-compaction")
    rows = _rows_for(args.keys, args.batches)
    results: dict[str, float] = {}
    shapes: list[dict] = []
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
        targets = plan_compaction(ckpt, CompactionPlanOptions(quiet_seconds=0)).targets
        # Python workers start and import once per session; (c) measures the job, not that
        results["worker_start_s"] = _timed(
            lambda: spark.sparkContext.parallelize(range(2), 2).map(_import_the_rebuild).collect()
        )
        started = time.perf_counter()
        per_store = run_compaction_tasks(spark, tasks_for(ckpt, targets), check=lambda _: None)
        results["job_wall_s"] = time.perf_counter() - started
        assert all(r.ok for r in per_store), per_store
        results["stores"] = len(per_store)
        results["rebuild_mean_s"] = sum(r.rebuilt.seconds for r in per_store) / len(per_store)
        # what a task spends besides the rebuild: loading the checkpoint it was handed
        overheads = [r.task_seconds - r.rebuilt.seconds for r in per_store]
        results["task_overhead_mean_s"] = sum(overheads) / len(overheads)
        # (c)'s baseline: the same stores rebuilt one after another in this process
        sequential = load_checkpoint(str(out / "sequential"))
        seq_targets = plan_compaction(sequential, CompactionPlanOptions(quiet_seconds=0)).targets
        results["sequential_sum_s"] = _timed(
            lambda: [rebuild_store(sequential, t.entry) for t in seq_targets]
        )

        # (b) one big store per shape: Spark's own load-and-replay against our rebuild of that version
        for keys, batches in args.shapes:
            big_rows = _rows_for(keys, batches, per_batch=args.big_records // batches)
            one_conf = {**NO_SNAPSHOTS, "spark.sql.shuffle.partitions": "1"}
            one = Scenario("bench-one", "", aggregation, batches, one_conf, inputs={"": big_rows})
            where = out / f"one-{keys}x{batches}"
            one.build(spark, where)
            spark_s = min(_state_read(spark, where / "checkpoint") for _ in range(2))
            rebuilt = min((_rebuild_one_store(where / "checkpoint", where / f"copy-{i}") for i in range(2)),
                          key=lambda r: r.seconds)  # best of two, as Spark's figure  # fmt: skip
            shapes.append({
                "key_space": keys, "changelogs": batches, "records": rebuilt.records,
                "distinct_keys": rebuilt.keys, "spark_s": round(spark_s, 3),
                "rebuild_s": rebuilt.seconds, "ratio": round(rebuilt.seconds / spark_s, 3),
            })  # fmt: skip
            print(f"(b) {shapes[-1]}", flush=True)

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
        big = _big_bases(spark, args.big_bases, out) if "d" in args.parts else []
    spark.stop()
    r = results
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}, indent=2))
    for what in ("read", "restart"):
        vs_spark = r[f"{what}_compacted_s"] / r[f"{what}_spark_snapshot_s"]
        vs_delta = r[f"{what}_delta_only_s"] / r[f"{what}_compacted_s"]
        print(f"(a) {what}: compacted / Spark's own snapshot = {vs_spark:.2f}; "
              f"delta-only / compacted = {vs_delta:.2f}")  # fmt: skip
    for shape in shapes:
        print(f"(b) one store, {shape['records']:,} records over {shape['distinct_keys']:,} keys in "
              f"{shape['changelogs']} changelogs: rebuild / Spark's load-and-replay "
              f"= {shape['ratio']:.2f}")  # fmt: skip
    parallel = r["job_wall_s"] / r["sequential_sum_s"]
    print(f"(c) job wall / the stores one after another = {parallel:.2f} ({r['stores']} stores)")
    _print_big(big)


def _print_big(big: list[dict]) -> None:
    if not big:
        return
    first, last = big[0], big[-1]
    for row in big:
        print(f"(d) base of {row['base_keys']:,} keys, {row['records']:,} records in the chain: rebuild "
              f"{row['rebuild_s']} s, peak RSS {row['peak_rss_mb']} MB; Spark's load-and-replay "
              f"{row['spark_s']} s; rebuild / Spark = {row['ratio']:.2f}")  # fmt: skip
    print(f"(d) from {first['base_keys']:,} to {last['base_keys']:,} keys: peak RSS x"
          f"{last['peak_rss_mb'] / first['peak_rss_mb']:.2f}, rebuild seconds x"
          f"{last['rebuild_s'] / first['rebuild_s']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
