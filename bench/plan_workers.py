"""Benchmark: a cleanup plan in a process that runs other threads, as a Dagster run does, where its
worker processes must be spawned: the workers the plan chooses for itself, against the same plan
made in that one process (the baseline), on a small and a large synthetic checkpoint.

    python -m bench.plan_workers [--shapes 16x20,64x200] [--runs 5]

Each shape is PARTITIONSxVERSIONS of `testbed.synthetic` (one store a partition), written to a
temporary folder. The two sides run in turn, each first every other time, and their manifests'
candidate lines must be the same. Reported per shape and side: the median wall seconds of
`--runs` plans, the CPU seconds of the worker processes they started (all runs), and the wall
ratio to the baseline.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import threading
import time
from pathlib import Path

from checkpoint.cleanup import GcPlanOptions, plan_gc
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.storage import Storage
from testbed.synthetic import iter_files, write_local


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _plan(root: Path, audit: Path, workers: int | None) -> tuple[float, float, list[bytes]]:
    """(wall seconds, the workers' CPU seconds, the manifest's candidate lines) of one plan."""
    cpu, began = _children_cpu(), time.perf_counter()
    request = InPlace(Storage(str(root)), taken_at_once("bench"), AuditTrail(str(audit)))
    plan = plan_gc(request, GcPlanOptions(now=time.time() + 10**7, query_stopped=True, workers=workers))
    wall = time.perf_counter() - began
    _, *lines = Path(plan.manifest.removeprefix("file://")).read_bytes().splitlines()
    return wall, _children_cpu() - cpu, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shapes", default="16x20,64x200", help="PARTITIONSxVERSIONS, comma-separated")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    done = threading.Event()
    threading.Thread(target=done.wait, daemon=True).start()  # as a Dagster run's threads: workers are spawned
    with tempfile.TemporaryDirectory() as work:
        for shape in args.shapes.split(","):
            partitions, versions = (int(n) for n in shape.split("x"))
            root = Path(work) / shape / "checkpoint"
            n = write_local(root, iter_files(partitions, versions))
            walls: dict[int | None, list[float]] = {0: [], None: []}
            cpu, candidates = 0.0, {}
            for i in range(args.runs):  # the two sides in turn, each first every other time
                for workers in (0, None) if i % 2 == 0 else (None, 0):
                    took, spent, candidates[workers] = _plan(
                        root, Path(work) / shape / f"{workers}-{i}", workers
                    )
                    walls[workers].append(took)
                    cpu += spent if workers is None else 0.0
                assert candidates[None] == candidates[0], "the plans differ"
            base_wall, wall = statistics.median(walls[0]), statistics.median(walls[None])
            print(f"{n:,} files in {partitions} partitions: in one process {base_wall:.3f} s; "
                  f"workers as the plan chooses {wall:.3f} s ({wall / base_wall:.2f}x), "
                  f"their CPU {cpu:.2f} s over {args.runs} plans")  # fmt: skip
    done.set()


if __name__ == "__main__":
    main()
