"""Benchmark: compaction of format V1 stores against Spark's own load-and-replay of the same store.

One store (one partition) per base size and provider, written by PySpark and cached outside the
repo (`testbed.generators.ensure_big_base`): a base snapshot that Spark's maintenance wrote, then 20
batches of 5,000 records each, snapshots off. For each:

  Spark: a state read of the latest batch (the state data source: load and replay), best of two,
         in this process's session (its start excluded);
  ours:  the compaction of that store in a fresh process, best of two by seconds:
         - the HDFS-backed store: `materialize_snapshot` with Spark's provider in a local session
           (the chain copied, loaded, maintenance run, the snapshot reloaded and decoded,
           published); the session's start is excluded, the driver JVM's peak RSS is reported
           beside the Python process's;
         - RocksDB V1: `rebuild_store` (no Spark), the Python process's peak RSS.

    python -m bench.compaction_v1 [--keys 1000000,10000000] [--states hdfs,rocksdb_v1]
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

from jobs.spark_session import local_session, scoped_confs
from testbed.generators import ensure_big_base

TOUCH = 500_000  # the chain updates keys below this: present in every base
V1_SESSION = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "1"}
# The HDFS-backed store holds the whole map on the driver JVM's heap (local mode), as an executor
# of the running query does.
SESSION = {"spark.driver.memory": "12g"}


def _compact_in_place(path: str) -> dict:
    """In a fresh interpreter: plan, then compact the one store; its figures and the peaks."""
    from checkpoint.compaction import (
        CompactionPlanOptions,
        materialize_snapshot,
        plan_compaction,
        rebuild_store,
    )
    from checkpoint.format import Provider
    from checkpoint.model import load_checkpoint
    from jobs.compact import SparkSnapshotEngine

    ckpt = load_checkpoint(path)
    (target,) = plan_compaction(ckpt, CompactionPlanOptions(quiet_seconds=0)).targets
    jvm_pid = None
    if ckpt.provider == Provider.HDFS:
        spark = local_session(master="local[2]", app_name="bench-v1", extra_conf=SESSION)
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        result = materialize_snapshot(ckpt, target.entry, SparkSnapshotEngine(spark))
    else:
        result = rebuild_store(ckpt, target.entry)
    out = result.as_dict()
    out["jvm_peak_rss_bytes"] = _vm_hwm(jvm_pid) if jvm_pid else 0
    return out


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _fresh(checkpoint: Path, copy: Path) -> dict:
    shutil.copytree(checkpoint, copy)
    code = ("import json, sys; from bench.compaction_v1 import _compact_in_place as c; "
            "print(json.dumps(c(sys.argv[1])))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"compaction of {copy} failed:\n{out.stderr[-3000:]}")
    shutil.rmtree(copy)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _state_read(spark, path: Path) -> float:
    started = time.perf_counter()
    with scoped_confs(spark, V1_SESSION):
        spark.read.format("statestore").load(str(path)).count()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--keys", type=lambda t: [int(n) for n in t.split(",")], default=[1_000_000, 10_000_000]
    )
    parser.add_argument("--states", type=lambda t: t.split(","), default=["hdfs", "rocksdb_v1"])
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    bases = {
        (s, k): ensure_big_base(k, TOUCH, state=s) / "checkpoint" for s in args.states for k in args.keys
    }
    spark = local_session(master="local[2]", app_name="bench-v1-spark", extra_conf=SESSION)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for (state, keys), checkpoint in bases.items():
            spark_s = min(_state_read(spark, checkpoint) for _ in range(2))
            runs = [_fresh(checkpoint, Path(tmp) / f"{state}-{keys}-{i}") for i in range(2)]
            best = min(runs, key=lambda r: r["seconds"])
            rows.append({
                "state": state, "keys": best["keys"], "chain": best["chain_length"],
                "bytes_read": best["bytes_read"], "bytes_written": best["bytes_written"],
                "compact_s": best["seconds"], "spark_s": round(spark_s, 3),
                "ratio": round(best["seconds"] / spark_s, 3),
                "python_peak_rss_mb": round(max(r["peak_rss_bytes"] for r in runs) / 2**20),
                "jvm_peak_rss_mb": round(max(r["jvm_peak_rss_bytes"] for r in runs) / 2**20),
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    spark.stop()
    for state in args.states:
        mine = [r for r in rows if r["state"] == state]
        for r in mine:
            print(f"{state}: {r['keys']:,} keys, chain of {r['chain']}: compaction {r['compact_s']} s, "
                  f"Spark's load-and-replay {r['spark_s']} s, ratio {r['ratio']:.2f}; peak RSS Python "
                  f"{r['python_peak_rss_mb']} MB, driver JVM {r['jvm_peak_rss_mb']} MB")  # fmt: skip
        if len(mine) > 1:
            first, last = mine[0], mine[-1]
            print(f"{state}: from {first['keys']:,} to {last['keys']:,} keys: Python peak RSS x"
                  f"{last['python_peak_rss_mb'] / first['python_peak_rss_mb']:.2f}"
                  + (f", driver JVM x{last['jvm_peak_rss_mb'] / first['jvm_peak_rss_mb']:.2f}"
                     if first["jvm_peak_rss_mb"] else ""))  # fmt: skip


if __name__ == "__main__":
    main()
