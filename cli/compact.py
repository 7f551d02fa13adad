"""`ckpt compact`: materialise snapshots for stores with long changelog chains, a Spark job each."""

from __future__ import annotations

import argparse

from checkpoint.policy import POLICY
from checkpoint.safety import EachInPlace
from checkpoint.storage import Storage

from . import render
from .common import EXIT_FINDINGS, WHERE, Result, in_place, master_option, takes_the_lease, whole

# The figures of each rebuild: what it read and wrote, and the memory it took.
_SHOWN = ("operator", "partition", "store", "version", "unique_id", "path", "seconds", "keys", "chain_before",
          "records", "touched_keys", "bytes_read", "bytes_written", "peak_rss_bytes", "memtable_bytes",
          "block_cache_bytes")  # fmt: skip


def compact(args: argparse.Namespace) -> Result:
    from checkpoint.compaction import CompactionOptions, CompactionPlanOptions, compact_checkpoints
    from jobs.compact import run_compaction_tasks  # Spark starts only for this command
    from jobs.spark_session import session_for

    conf = {"spark.driver.memory": args.driver_memory} if args.driver_memory else None
    request = EachInPlace([args.path], lambda path: in_place(args, Storage(path)))
    options = CompactionOptions(
        lambda tasks, check: run_compaction_tasks(session_for(args.master, conf=conf), tasks, check),
        plan=CompactionPlanOptions(min_chain=args.min_chain), strict=False, go_on=False, what="compact",
    )  # fmt: skip
    done = compact_checkpoints(request, options)
    doc = {
        "materialized": [{k: r.as_dict()[k] for k in _SHOWN} for r in done.outcomes if r.ok],
        "failed": [r.as_dict() for r in done.outcomes if not r.ok],
        "skipped": [s.as_dict() for p in done.planned for s in p.skips],
    }
    return Result(doc, render.compact_text, EXIT_FINDINGS if doc["failed"] else 0)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compact", help="materialise snapshots for stores with long changelog chains")
    p.add_argument("path", help=WHERE)
    p.add_argument("--min-chain", type=whole(1), default=POLICY.long_chain, metavar="N",
                   help=f"compact from this chain length ({POLICY.long_chain})")  # fmt: skip
    master_option(p, " for the rebuild job")
    p.add_argument("--driver-memory", metavar="SIZE",
                   help="the driver's heap (spark.driver.memory, e.g. 8g): the HDFS-backed store's map is "
                   "loaded there")  # fmt: skip
    takes_the_lease(p, writes_no_plan=True)
    p.set_defaults(run=compact)
