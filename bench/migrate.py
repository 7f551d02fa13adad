"""Benchmark: `ckpt migrate` of an aggregation's state against what Spark itself does with it.

An aggregation in `--partitions` partitions (4) per base size and source format, cached outside the
repo (`testbed.generators.ensure_big_base`): a base snapshot of the keys, then 20 batches of 5,000
records in each store. For each:

  ours:  the migration to RocksDB V2 in this process's session, as Spark's baseline runs (its
         tasks write the stores; the proof reads both sides with it), best of two; and once in a
         fresh process, its Spark session started before the clock: its seconds (a cold JVM's
         first state reads included), the driver's Python peak RSS, and the highest peak RSS of
         the Python workers that ran the store tasks;
  Spark: for RocksDB V1, Spark's repartitioner rewriting the same state (to twice the partitions,
         in a V1 session: the rewrite the engine can do of it); for the HDFS-backed store, which
         Spark's rewriter cannot read, its load-and-replay (a state read), the least any move of
         the state costs, and its repartition of the same rows held in RocksDB V1 (both bases
         measured: the proofs' digests show the rows are the same). Best of two, in this
         process's session.

    python -m bench.migrate [--keys 1000000,10000000] [--states hdfs,rocksdb_v1] [--partitions 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.compaction_v1 import SESSION, TOUCH, V1_SESSION, _state_read, _vm_hwm
from jobs.spark_session import local_session, scoped_confs
from testbed.generators import ensure_big_base


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone since the listing
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _python_workers(pid: int) -> list[int]:
    """Spark's Python workers under this driver (its JVM's `pyspark.daemon` and the workers it forked)."""
    out = []
    for child in _descendants(pid):
        try:
            if b"pyspark" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(child)
        except OSError:
            continue
    return out


def _migrate_in_place(src: str, dest: str, audit: str) -> dict:
    """In a fresh interpreter: the migration, its figures, the driver's peak RSS and its Python
    workers' (they write the stores)."""
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from checkpoint.safety import AuditTrail, TwoSided, taken_at_once
    from checkpoint.storage import Storage
    from jobs.migrate import spark_ports

    spark = local_session(master="local[2]", app_name="bench-migrate", extra_conf=SESSION)
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on: not the session's start
    workers_before = set(_python_workers(os.getpid()))
    request = TwoSided(Storage(src), Storage(dest), taken_at_once("bench"), AuditTrail(audit))
    result = migrate_checkpoint(request, MigrationOptions(spark_ports(lambda: spark), quiet_seconds=0))
    workers = [w for w in _python_workers(os.getpid()) if w not in workers_before]
    return {**result.as_dict(), "peak_rss_bytes": _vm_hwm(os.getpid()),
            "worker_peak_rss_bytes": max((_vm_hwm(w) for w in workers), default=0)}  # fmt: skip


def _fresh(checkpoint: Path, work: Path) -> dict:
    code = ("import json, sys; from bench.migrate import _migrate_in_place as m; "
            "print(json.dumps(m(*sys.argv[1:])))")  # fmt: skip
    args = [str(checkpoint), str(work / "dest"), str(work / "audit")]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"migration of {checkpoint} failed:\n{out.stderr[-3000:]}")
    shutil.rmtree(work)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _in_session(spark, checkpoint: Path, work: Path) -> dict:
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from checkpoint.safety import AuditTrail, TwoSided, taken_at_once
    from checkpoint.storage import Storage
    from jobs.migrate import spark_ports

    started = time.perf_counter()
    audit = AuditTrail(str(work / "audit"))
    request = TwoSided(Storage(str(checkpoint)), Storage(str(work / "dest")), taken_at_once("bench"), audit)
    options = MigrationOptions(spark_ports(lambda: spark), quiet_seconds=0)
    result = migrate_checkpoint(request, options)
    seconds = time.perf_counter() - started
    shutil.rmtree(work)
    return {**result.as_dict(), "seconds": seconds}


def _spark_rewrite(spark, checkpoint: Path, copy: Path, partitions: int) -> float:
    shutil.copytree(checkpoint, copy)
    started = time.perf_counter()
    with scoped_confs(spark, V1_SESSION):
        spark._streamingCheckpointManager.repartition(str(copy), 2 * partitions)
    seconds = time.perf_counter() - started
    shutil.rmtree(copy)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=lambda t: [int(n) for n in t.split(",")],
                        default=[1_000_000, 10_000_000])  # fmt: skip
    parser.add_argument("--states", type=lambda t: t.split(","), default=["hdfs", "rocksdb_v1"])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    bases = {(s, k): ensure_big_base(k, TOUCH, state=s, partitions=args.partitions) / "checkpoint"
             for s in args.states for k in args.keys}  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        # First, while no other JVM holds a store on its heap: the HDFS-backed store's reads need
        # the driver's 12 GiB at 10M keys, in either process.
        fresh_runs = {base: _fresh(checkpoint, Path(tmp) / "fresh") for base, checkpoint in bases.items()}
        spark = local_session(master="local[2]", app_name="bench-migrate-spark", extra_conf=SESSION)
        for (state, keys), checkpoint in bases.items():
            if state == "hdfs":
                baseline, spark_s = "load-and-replay", min(_state_read(spark, checkpoint) for _ in range(2))
            else:
                copies = [Path(tmp) / f"rewrite-{i}" for i in range(2)]
                baseline, spark_s = (
                    "repartition",
                    min(_spark_rewrite(spark, checkpoint, c, args.partitions) for c in copies),
                )
            runs = [_in_session(spark, checkpoint, Path(tmp) / f"{state}-{keys}-{i}") for i in range(2)]
            best = min(runs, key=lambda r: r["seconds"])
            fresh = fresh_runs[state, keys]
            rows.append({
                "state": state, "keys": best["keys"], "migrate_s": round(best["seconds"], 3),
                "state_s": best["state_seconds"], "proof_s": best["proof_seconds"], "baseline": baseline,
                "spark_s": round(spark_s, 3), "ratio": round(best["seconds"] / spark_s, 3),
                "fresh_process_s": fresh["seconds"],
                "python_peak_rss_mb": round(fresh["peak_rss_bytes"] / 2**20),
                "worker_peak_rss_mb": round(fresh["worker_peak_rss_bytes"] / 2**20),
                "digest": [(p["rows"], p["digest"]) for p in best["proven"]],
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
        spark.stop()
    _against_the_same_state(rows)
    for r in rows:
        print(f"{r['state']}: {r['keys']:,} keys: migration {r['migrate_s']} s (state {r['state_s']} s, "
              f"proof {r['proof_s']} s), "
              f"Spark's {r['baseline']} {r['spark_s']} s, ratio {r['ratio']:.2f}; in a fresh process "
              f"{r['fresh_process_s']} s, peak RSS: the driver's Python {r['python_peak_rss_mb']} MB, "
              f"a store task's {r['worker_peak_rss_mb']} MB")  # fmt: skip
        if "same_state_spark_s" in r:
            print(f"  against Spark's repartition of the same rows held in RocksDB V1 "
                  f"({r['same_state_spark_s']} s): ratio {r['same_state_ratio']:.2f}")  # fmt: skip


def _against_the_same_state(rows: list[dict]) -> None:
    """The HDFS-backed migration against the one rewrite Spark has of its rows: its repartition of
    them held in RocksDB V1 (the bases hold the same query's state over the same input; the proofs'
    row counts and digests must say so, or no such figure is given)."""
    repartitions = {r["keys"]: r for r in rows if r["state"] == "rocksdb_v1"}
    for r in rows:
        other = repartitions.get(r["keys"])
        if r["state"] != "hdfs" or other is None:
            continue
        if other["digest"] != r["digest"]:
            print(f"{r['keys']:,} keys: the two bases' rows differ ({r['digest']} / {other['digest']})")
            continue
        r["same_state_spark_s"] = other["spark_s"]
        r["same_state_ratio"] = round(r["migrate_s"] / other["spark_s"], 3)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
