"""Benchmark: S3 requests per operation, counted at a proxy in front of a real S3 server on loopback.

The corpus checkpoints are uploaded to SeaweedFS (the tests' server); each operation runs against
them through the counting proxy, and the count is set beside the least the S3 API allows: a listing
returns at most 1000 keys, a DeleteObjects deletes at most 1000, and a file that must be read
costs one GET (one HEAD when only its size must be checked).

    python -m bench.s3_requests [--copies 4]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from checkpoint.analysis import ValidationOptions, validate
from checkpoint.cleanup import CleanupOptions, GcPlanOptions, apply_cleanup, plan_gc
from checkpoint.compaction import CompactionPlanOptions, plan_compaction
from checkpoint.errors import CheckpointError
from checkpoint.model import find_checkpoints
from checkpoint.safety import AuditTrail, InPlace, Plan, taken_at_once
from checkpoint.storage import Storage
from testbed.copying import upload_checkpoint
from testbed.corpus import checkpoints, ensure_corpus
from testbed.s3proxy import S3Proxy
from testbed.s3server import s3_services


def _apply(storage: Storage, plan: Plan, audit: AuditTrail) -> None:
    """Through the door, as the CLI applies a plan: the lease, the check, the apply."""
    options = CleanupOptions(lambda: plan, planned=plan, what="cleanup")
    apply_cleanup(InPlace(storage, taken_at_once("bench"), audit), options)


def _row(what: str, counts, objects: int, minimum: int, note: str) -> str:
    total = sum(counts.values())
    detail = ", ".join(f"{op} {n}" for op, n in sorted(counts.items()))
    per_k = 1000 * total / objects
    return (
        f"| {what} | {objects} | {total} ({detail}) | {per_k:.1f} | {1000 * minimum / objects:.1f} | {note} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4, help="uploads of the whole corpus")
    args = parser.parse_args()
    corpus = checkpoints(ensure_corpus())
    with tempfile.TemporaryDirectory() as work, s3_services(Path(work), "bench") as (server, proxy):
        fs = server.filesystem()
        for i in range(args.copies):
            for name, path in corpus.items():
                # Schema paths renamed as Spark would have written them there (else: MOVED_CHECKPOINT);
                # Hadoop's hidden checksums kept, as the table in docs/s3.md was measured.
                upload_checkpoint(fs, path, f"bench/c{i}/{name}", hadoop_checksums=True)
        options = server.storage_options(proxy.endpoint)
        rows = _measure(Storage("s3://bench", options), proxy, Path(work))
    print("| operation | objects | requests | per 1000 objects | least per 1000 | what must be read |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


def _measure(root: Storage, proxy: S3Proxy, work: Path) -> list[str]:
    rows = []
    objects = len(root.list_files())  # the denominator, before counting starts
    proxy.reset()
    found = find_checkpoints(root)
    lists = proxy.counts()["ListObjectsV2"]
    rows.append(_row("scan (discovery)", proxy.counts(), objects, lists, "shallow folder listings"))

    proxy.reset()
    loaded = [f.load(root, strict=False) for f in found]
    for c in loaded:
        validate(c, ValidationOptions())
    rows.append(
        _row("validate (head-first)", proxy.counts(), objects, _distinct(proxy),
             "logs; per store the committed header, lineage zips, chain and SST stats")
    )  # fmt: skip

    proxy.reset()
    now = time.time() + 7 * 3600
    plans = []
    audit = AuditTrail(str(work / "audit"))
    for f in found:
        try:
            storage = root.child(f.rel)
            request = InPlace(storage, taken_at_once("bench"), audit)
            plans.append((storage, plan_gc(request, GcPlanOptions(now=now, query_stopped=True))))
        except CheckpointError:  # the corpus's damaged and V1 checkpoints are refused, by design
            continue
    rows.append(
        _row(
            "cleanup plan", proxy.counts(), objects, _distinct(proxy), "full listing, every retained lineage"
        )
    )

    candidates = sum(p.files for _, p in plans)
    proxy.reset()
    for storage, p in plans:
        _apply(storage, p, audit)
    deletes = sum(math.ceil(p.files / 1000) for _, p in plans)
    rows.append(
        _row("cleanup apply", proxy.counts(), max(candidates, 1), deletes + _distinct(proxy),
             f"{candidates} deletions in {len(plans)} checkpoints; the logs re-read, each batch stat again")
    )  # fmt: skip

    proxy.reset()
    targets = 0
    for f in found[:4]:
        targets += len(
            plan_compaction(
                f.load(root, recent=2), CompactionPlanOptions(min_chain=1, quiet_seconds=0)
            ).targets
        )
    rows.append(_row("compaction plan", proxy.counts(), objects, _distinct(proxy), f"{targets} targets"))
    return rows


def _distinct(proxy: S3Proxy) -> int:
    """Objects read or checked at least once: the least GETs and HEADs that can cost."""
    return len({r.path for r in proxy.requests if r.op in ("GetObject", "HeadObject")})


if __name__ == "__main__":
    main()
