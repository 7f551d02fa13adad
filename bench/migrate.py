"""Benchmark: `ckpt migrate` of one big store against what Spark itself does with the same state.

One store (one partition) per base size and source format, cached outside the repo
(`testbed.corpus.ensure_big_base`, the inputs of bench/compaction_v1.py): a base snapshot and 20
batches of 5,000 records. For each:

  ours:  the migration to RocksDB V2 in this process's session, as Spark's baseline runs (the
         proof reads both sides with it), best of two; and once in a fresh process, its Spark
         session started before the clock: its seconds (a cold JVM's first state reads
         included) and the Python process's peak RSS;
  Spark: for RocksDB V1, Spark's repartitioner rewriting the same state (1 to 2 partitions, in a
         V1 session: the rewrite the engine can do of it); for the HDFS-backed store, which Spark's
         rewriter cannot read, its load-and-replay (a state read), the least any move of the
         state costs. Best of two, in this process's session.

    python -m bench.migrate [--keys 1000000,10000000] [--states hdfs,rocksdb_v1]
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

from bench.compaction_v1 import SESSION, TOUCH, V1_SESSION, _state_read, _vm_hwm
from jobs.spark_session import local_session, scoped_confs
from testbed.corpus import ensure_big_base


def _migrate_in_place(src: str, dest: str, audit: str) -> dict:
    """In a fresh interpreter: the migration, its figures and the process's peak RSS."""
    import os

    from checkpoint.cleanup.audit import AuditTrail
    from checkpoint.storage import Storage
    from jobs.migrate import migrate

    spark = local_session(master="local[2]", app_name="bench-migrate", extra_conf=SESSION)
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on: not the session's start
    result = migrate(lambda: spark, Storage(src), Storage(dest), AuditTrail(audit), quiet_seconds=0)
    return {**result.as_dict(), "peak_rss_bytes": _vm_hwm(os.getpid())}


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
    from checkpoint.cleanup.audit import AuditTrail
    from checkpoint.storage import Storage
    from jobs.migrate import migrate

    started = time.perf_counter()
    result = migrate(lambda: spark, Storage(str(checkpoint)), Storage(str(work / "dest")),
                     AuditTrail(str(work / "audit")), quiet_seconds=0)  # fmt: skip
    seconds = time.perf_counter() - started
    shutil.rmtree(work)
    return {**result.as_dict(), "seconds": seconds}


def _spark_rewrite(spark, checkpoint: Path, copy: Path) -> float:
    shutil.copytree(checkpoint, copy)
    started = time.perf_counter()
    with scoped_confs(spark, V1_SESSION):
        spark._streamingCheckpointManager.repartition(str(copy), 2)
    seconds = time.perf_counter() - started
    shutil.rmtree(copy)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=lambda t: [int(n) for n in t.split(",")],
                        default=[1_000_000, 10_000_000])  # fmt: skip
    parser.add_argument("--states", type=lambda t: t.split(","), default=["hdfs", "rocksdb_v1"])
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    bases = {(s, k): ensure_big_base(k, TOUCH, state=s) / "checkpoint"
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
                baseline, spark_s = "repartition", min(_spark_rewrite(spark, checkpoint, c) for c in copies)
            runs = [_in_session(spark, checkpoint, Path(tmp) / f"{state}-{keys}-{i}") for i in range(2)]
            best = min(runs, key=lambda r: r["seconds"])
            fresh = fresh_runs[state, keys]
            rows.append({
                "state": state, "keys": best["keys"], "migrate_s": round(best["seconds"], 3),
                "write_s": round(sum(s["seconds"] for s in best["stores"]), 3), "baseline": baseline,
                "spark_s": round(spark_s, 3), "ratio": round(best["seconds"] / spark_s, 3),
                "fresh_process_s": fresh["seconds"],
                "python_peak_rss_mb": round(fresh["peak_rss_bytes"] / 2**20),
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
        spark.stop()
    for r in rows:
        print(f"{r['state']}: {r['keys']:,} keys: migration {r['migrate_s']} s (writing {r['write_s']} s), "
              f"Spark's {r['baseline']} {r['spark_s']} s, ratio {r['ratio']:.2f}; in a fresh process "
              f"{r['fresh_process_s']} s, Python peak RSS {r['python_peak_rss_mb']} MB")  # fmt: skip


if __name__ == "__main__":
    main()
