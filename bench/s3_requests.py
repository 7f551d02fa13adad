"""Benchmark: S3 requests per operation, counted at a proxy in front of a real S3 server on loopback.

The corpus checkpoints are uploaded to SeaweedFS (the tests' server); each operation runs against
them through the counting proxy, and the count is set beside the least the S3 API allows: a listing
returns at most 1000 keys, a DeleteObjects deletes at most 1000, and a file that must be read
costs one GET.

    python -m bench.s3_requests [--copies 4]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from checkpoint.compaction import plan_compaction
from checkpoint.discovery import find_checkpoints
from checkpoint.errors import CheckpointError
from checkpoint.gc_apply import AuditTrail, apply_plan
from checkpoint.gc_plan import plan_gc
from checkpoint.layout import FileKind
from checkpoint.storage import Storage
from checkpoint.validate import ValidationOptions, validate
from jobs.corpus import checkpoints, ensure_corpus
from tests.support.s3proxy import S3Proxy
from tests.support.s3server import s3_services


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
                fs.put(str(path) + "/", f"bench/c{i}/{name}", recursive=True)
        options = server.storage_options(proxy.endpoint)
        rows = _measure(Storage("s3://bench", options), proxy, Path(work))
    print("| operation | objects | requests | per 1000 objects | least per 1000 | what must be read |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


def _measure(root: Storage, proxy: S3Proxy, work: Path) -> list[str]:
    rows = []
    proxy.reset()
    found = find_checkpoints(root)
    objects = sum(len(f.files) for f in found)
    rows.append(_row("scan (discovery)", proxy.counts(), objects, math.ceil(objects / 1000), "one listing"))

    proxy.reset()
    loaded = [f.load(root, strict=False) for f in found]
    small = (FileKind.QUERY_METADATA, FileKind.OFFSET, FileKind.COMMIT, FileKind.OPERATOR_METADATA)
    must = sum(1 for c in loaded for f in c.files if f.kind in small)  # read whole by every load
    rows.append(
        _row("load (logs and metadata)", proxy.counts(), objects, must, "commit/offset logs, metadata")
    )

    proxy.reset()
    for c in loaded:
        validate(c, ValidationOptions())
    rows.append(
        _row("validate", proxy.counts(), objects, _distinct(proxy), "newest header per store, zip metadata")
    )

    proxy.reset()
    now = time.time() + 7 * 3600
    plans = []
    for c in loaded:
        try:
            plans.append((c, plan_gc(c, now=now)))
        except CheckpointError:  # the corpus's damaged and V1 checkpoints are refused, by design
            continue
    rows.append(
        _row(
            "cleanup plan", proxy.counts(), objects, _distinct(proxy), "every retained lineage, zip metadata"
        )
    )

    candidates = sum(len(p.candidates) for _, p in plans)
    proxy.reset()
    audit = AuditTrail(str(work / "audit"))
    for c, p in plans:
        apply_plan(p, c.storage, audit)
    deletes = sum(math.ceil(len(p.candidates) / 1000) for _, p in plans)
    rows.append(
        _row("cleanup apply", proxy.counts(), max(candidates, 1), deletes + _distinct(proxy),
             f"{candidates} deletions in {len(plans)} checkpoints; the commit log re-read")
    )  # fmt: skip

    proxy.reset()
    targets = sum(len(plan_compaction(c, min_chain=1, quiet_seconds=0)[0]) for c in loaded[:4])
    rows.append(_row("compaction plan", proxy.counts(), objects, _distinct(proxy), f"{targets} targets"))
    return rows


def _distinct(proxy: S3Proxy) -> int:
    """Objects read at least once: the least GETs that reading them can cost."""
    return len({r.path for r in proxy.requests if r.op == "GetObject"})


if __name__ == "__main__":
    main()
