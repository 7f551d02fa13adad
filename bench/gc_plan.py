"""Benchmark: planning an orphan cleanup of a 1,000,000-file checkpoint, against a naive baseline.

The synthetic checkpoint follows a real store's naming (testbed/synthetic.py: V2 changelogs
and zips with ids, lost attempts, SSTs shared by snapshots, Spark `.crc` sidecars and Hadoop hidden
crcs) and is written to a local folder, files dated a month back. The baseline is what a tool
without a format model does: one listing, then one stat per file. Each side runs in a child process
of its own, so its peak RSS is its own (the parent held the checkpoint's content while building
it). Requests are the storage calls each side makes; on S3 a listing costs one request per 1000
keys, which the S3-equivalent figures add.

    python -m bench.gc_plan [--partitions 300] [--versions 500] [--listing flat|per_partition] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from checkpoint.gc_plan import plan_gc
from checkpoint.model import LISTINGS, load_checkpoint
from checkpoint.storage import Storage
from testbed.synthetic import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--versions", type=int, default=500)
    parser.add_argument("--listing", choices=LISTINGS, default="auto")
    parser.add_argument("--dir", type=Path, help="where to build it (default: a temporary folder)")
    parser.add_argument("--side", choices=["baseline", "planner"], help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a child: one side, its figures as JSON on stdout
        run = _baseline if args.side == "baseline" else _planner
        print(json.dumps(run(args.root, args.listing)))
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp) / "ckpt"
        t = time.perf_counter()
        n = build(root, args.partitions, args.versions)
        print(f"synthetic checkpoint: {n:,} files ({time.perf_counter() - t:.0f} s to build)", flush=True)
        base, ours = (_child(side, root, args.listing) for side in ("baseline", "planner"))
    report(n, base, ours, args.listing)


def _child(side: str, root: Path, listing: str) -> dict:
    cmd = [sys.executable, "-m", "bench.gc_plan", "--side", side, "--root", str(root), "--listing", listing]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _baseline(root: Path, _listing: str) -> dict:
    storage = Storage(str(root))
    t = time.perf_counter()
    listed = storage.list_files()
    for f in listed:
        storage.stat(f.rel)
    return {"seconds": time.perf_counter() - t, "calls": dict(storage.calls.snapshot()),
            "s3_requests": -(-len(listed) // 1000) + len(listed), "peak_rss_mb": _peak_rss_mb()}  # fmt: skip


def _planner(root: Path, listing: str) -> dict:
    storage = Storage(str(root))
    t = time.perf_counter()
    ckpt = load_checkpoint(storage, listing=listing)
    loaded = time.perf_counter() - t
    plan = plan_gc(ckpt)
    seconds = time.perf_counter() - t
    calls = storage.calls.snapshot()
    pages = -(-len(ckpt.files) // 1000) + calls["list"] + calls["list_dir"]  # at least one a listing
    return {
        "seconds": seconds,
        "load_seconds": loaded,
        "calls": dict(calls),
        "s3_requests": pages + calls["open"] + calls["read"],
        "peak_rss_mb": _peak_rss_mb(),
        "candidates": plan.files,
        "retained": plan.retained_files,
        "reasons": {k: v["files"] for k, v in plan.totals("reason").items()},
    }


def report(n: int, base: dict, ours: dict, listing: str) -> None:
    print(f"plan: {ours['candidates']:,} candidates {ours['reasons']}, {ours['retained']:,} retained")
    print(
        f"baseline, a listing and a stat per file: {base['seconds']:.1f} s, peak RSS "
        f"{base['peak_rss_mb']:.0f} MB; {sum(base['calls'].values()):,} calls, {base['s3_requests']:,} on S3"
    )
    print(
        f"planner ({listing} listing): {ours['seconds']:.1f} s (loading {ours['load_seconds']:.1f} s), "
        f"peak RSS {ours['peak_rss_mb']:.0f} MB; calls {ours['calls']}; "
        f"{ours['s3_requests']:,} requests on S3"
    )
    print(
        f"planner / baseline: time {ours['seconds'] / base['seconds']:.2f}; S3 requests per 1000 objects "
        f"{1000 * ours['s3_requests'] / n:.1f} vs {1000 * base['s3_requests'] / n:.1f} "
        f"({ours['s3_requests'] / base['s3_requests']:.3f}); planner memory per file "
        f"{1024 * ours['peak_rss_mb'] / n:.2f} KiB"
    )


if __name__ == "__main__":
    main()
