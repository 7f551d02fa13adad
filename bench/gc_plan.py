"""Benchmark: planning an orphan cleanup of a 1,000,000-file checkpoint, against a bare listing.

The synthetic checkpoint follows a real store's naming (testbed/synthetic.py: V2 changelogs
and zips with ids, lost attempts, SSTs shared by snapshots, Spark `.crc` sidecars and Hadoop hidden
crcs) and is written to a local folder, files dated a month back, without ever being held whole.
The baseline is the least any cleanup must do: one recursive listing of everything, held in
memory. The planner lists each state partition on its own, decides it, and streams its candidates
to the manifest. Each side runs in a child process of its own, so its peak RSS is its own. Requests
are the storage calls each side makes; on S3 a listing costs one request per 1000 keys, which the
S3-equivalent figures add.

    python -m bench.gc_plan [--partitions 300] [--versions 500] [--dir DIR] [--pairs N]
    python -m bench.gc_plan --s3 --partitions 30     # ~100k objects on SeaweedFS, requests counted
    python -m bench.gc_plan --root DIR --pairs 5     # a checkpoint built before (a 10M one takes 12 min)

On these shared cores one pair's ratio moves by a tenth between runs: `--pairs N` runs the two
sides in turn N times on the one checkpoint and reports each pair and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from checkpoint.cleanup import GcPlanOptions, plan_gc
from checkpoint.cleanup.pool import partitions_at_once, planning_workers
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.storage import Storage
from testbed.synthetic import build, iter_files, upload


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--versions", type=int, default=500)
    parser.add_argument("--dir", type=Path, help="where to build it (default: a temporary folder)")
    parser.add_argument(
        "--s3", action="store_true", help="on SeaweedFS on loopback, through the counting proxy"
    )
    parser.add_argument("--pairs", type=int, default=1, help="baseline and planner in turn, this many times")
    parser.add_argument("--root", help="plan this local checkpoint instead of building one")
    parser.add_argument("--side", choices=["baseline", "planner"], help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--later", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if args.side:  # a child: one side, its figures as JSON on stdout
        storage = Storage(args.root, json.loads(args.options))
        print(json.dumps(_baseline(storage) if args.side == "baseline" else _planner(storage, args.later)))
        return
    if args.root:
        _pairs(args.pairs, lambda side: _child(side, args.root))
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.s3:
            _on_s3(args, Path(tmp))
            return
        root = Path(tmp) / "ckpt"
        t = time.perf_counter()
        n = build(root, args.partitions, args.versions)
        print(f"synthetic checkpoint: {n:,} files ({time.perf_counter() - t:.0f} s to build)", flush=True)
        _pairs(args.pairs, lambda side: _child(side, str(root)))


def _pairs(pairs: int, side: Callable[[str], dict]) -> None:
    """The baseline, then the planner, `pairs` times on one checkpoint: each pair reported as it
    ends, then every pair's time ratio and their median (the first pair of a series meets a colder
    page cache, its baseline slower)."""
    ratios = []
    for i in range(pairs):
        base, ours = side("baseline"), side("planner")
        print(f"pair {i + 1} of {pairs}:")
        report(base["files"], base, ours)
        ratios.append(ours["seconds"] / base["seconds"])
    if pairs > 1:
        print(f"time ratios of {pairs} pairs: {', '.join(f'{r:.2f}' for r in ratios)}; "
              f"median {statistics.median(ratios):.2f}")  # fmt: skip


def _on_s3(args, work: Path) -> None:
    from testbed.s3server import s3_services

    with s3_services(work / "seaweedfs", "bench") as (server, proxy):
        fs = server.filesystem()
        t = time.perf_counter()
        n = upload(fs, "bench/ckpt", iter_files(args.partitions, args.versions))
        print(f"synthetic checkpoint: {n:,} objects on SeaweedFS ({time.perf_counter() - t:.0f} s to upload)",
              flush=True)  # fmt: skip
        options = json.dumps(server.storage_options(proxy.endpoint))

        def side(name: str) -> dict:
            proxy.reset()
            # S3 dates each object by its upload: the plan is made as of 7 hours later, past the grace.
            figures = _child(name, "s3://bench/ckpt", options, later=7 * 3600)
            figures["s3_requests"] = sum(proxy.counts().values())  # what the store saw, not an estimate
            figures["by_operation"] = dict(proxy.counts())
            return figures

        _pairs(args.pairs, side)


def _child(side: str, root: str, options: str = "{}", later: float = 0.0) -> dict:
    cmd = [sys.executable, "-m", "bench.gc_plan", "--side", side, "--root", root, "--options", options,
           "--later", str(later)]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def _cpu_seconds() -> float:
    """User and system time of this process and its waited-for children (the planner's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _baseline(storage: Storage) -> dict:
    t, cpu = time.perf_counter(), _cpu_seconds()
    listed = storage.list_files()
    return {"seconds": time.perf_counter() - t, "files": len(listed), "calls": dict(storage.calls.snapshot()),
            "cpu_seconds": _cpu_seconds() - cpu,
            "s3_requests": -(-len(listed) // 1000), "peak_rss_mb": _peak_rss_mb()}  # fmt: skip


def _planner(storage: Storage, later: float) -> dict:
    with tempfile.TemporaryDirectory() as audit_dir:
        t, cpu = time.perf_counter(), _cpu_seconds()
        request = InPlace(storage, taken_at_once("bench"), AuditTrail(audit_dir))
        plan = plan_gc(request, GcPlanOptions(now=time.time() + later, query_stopped=True))
        seconds = time.perf_counter() - t
    calls = storage.calls.snapshot()
    # On S3: each partition's listing in pages of 1000 keys, each shallow listing one request, and
    # every read (logs, lineage headers, zips) one GET.
    pages = sum(-(-n // 1000) for n in plan.partition_files.values()) + calls["list_dir"]
    # Partitions decided in worker processes: their peaks count too, each as if all of them
    # peaked at once (the largest child's peak times their number, an upper bound).
    workers = planning_workers(storage, len(plan.partition_files))
    worker_mb = _peak_rss_mb(resource.RUSAGE_CHILDREN) if workers else 0.0
    return {
        "seconds": seconds,
        "cpu_seconds": _cpu_seconds() - cpu,
        "workers": workers,
        "at_once": partitions_at_once(storage, workers),
        "calls": dict(calls),
        "s3_requests": pages + calls["open"] + calls["read"],
        "own_peak_rss_mb": _peak_rss_mb(),
        "worker_peak_rss_mb": worker_mb,
        "peak_rss_mb": _peak_rss_mb() + workers * worker_mb,
        "candidates": plan.files,
        "retained": plan.retained_files,
        "reasons": {k: v["files"] for k, v in plan.by_reason.items()},
    }


def report(n: int, base: dict, ours: dict) -> None:
    print(f"plan: {ours['candidates']:,} candidates {ours['reasons']}, {ours['retained']:,} retained")
    print(f"baseline, one recursive listing held in memory: {base['seconds']:.1f} s "
          f"({base['cpu_seconds']:.1f} s of CPU), peak RSS {base['peak_rss_mb']:.0f} MB; "
          f"{base['s3_requests']:,} requests on S3")  # fmt: skip
    print(f"planner, a partition at a time: {ours['seconds']:.1f} s ({ours['cpu_seconds']:.1f} s of CPU, "
          f"{ours['workers']} worker processes, {ours['at_once']} partitions at once in each), "
          f"peak RSS {ours['peak_rss_mb']:.0f} MB (itself "
          f"{ours['own_peak_rss_mb']:.0f} MB, each worker at most {ours['worker_peak_rss_mb']:.0f} MB); "
          f"calls {ours['calls']}; {ours['s3_requests']:,} requests on S3")  # fmt: skip
    print(f"planner / baseline: time {ours['seconds'] / base['seconds']:.2f}, peak RSS "
          f"{ours['peak_rss_mb'] / base['peak_rss_mb']:.2f}; S3 requests per 1000 objects "
          f"{1000 * ours['s3_requests'] / n:.1f} (a bare listing: "
          f"{1000 * base['s3_requests'] / n:.1f})")  # fmt: skip
    if "by_operation" in ours:
        print(f"requests by operation: baseline {base['by_operation']}; planner {ours['by_operation']}")


if __name__ == "__main__":
    main()
