"""`ckpt fork`: a new checkpoint holding exactly what recovery at a committed batch reads."""

from __future__ import annotations

import argparse

from checkpoint.policy import POLICY
from checkpoint.storage import Storage

from . import render
from .common import BATCH_ID, WHERE, Result, takes_the_lease, two_sided, whole


def fork_command(args: argparse.Namespace) -> Result | int:
    from checkpoint.fork import ForkOptions, fork_checkpoint

    request = two_sided(args, Storage(args.source), Storage(args.dest))
    options = ForkOptions(batch=args.batch, new_query_id=args.new_query_id, workers=args.workers)
    result = fork_checkpoint(request, options)
    return Result(result.as_dict(), render.fork_text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fork", help="a new checkpoint holding exactly what recovery at a committed batch "
                       "reads: relocate, roll back, or audit a copy")  # fmt: skip
    p.add_argument("source", help=WHERE)
    p.add_argument("dest", help="an empty folder or URL (copied server-side within one object store)")
    p.add_argument("--batch", type=BATCH_ID, help="a committed batch (default: the latest committed)")
    p.add_argument("--new-query-id", action="store_true",
                   help="give the fork a query id of its own (sinks that remember batches: "
                   "docs/fork.md)")  # fmt: skip
    p.add_argument("--workers", type=whole(1, 256), default=POLICY.fork_workers, metavar="N",
                   help=f"files copied at once (default {POLICY.fork_workers})")  # fmt: skip
    takes_the_lease(p, writes_no_plan=True)
    p.set_defaults(run=fork_command)
