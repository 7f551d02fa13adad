"""`ckpt gc`: plan (and with --apply, delete) files no batch will ever read again."""

from __future__ import annotations

import argparse
import json
import sys

from checkpoint.policy import POLICY, duration_text
from checkpoint.safety import AuditTrail, Plan
from checkpoint.storage import Storage

from . import render
from .common import (
    DELETE_BATCH,
    EXIT_FINDINGS,
    EXIT_OK,
    WHERE,
    Result,
    duration,
    in_place,
    quiet_period_option,
    quiet_seconds,
    takes_the_lease,
    trail_of,
    whole,
)


def _stream_candidates(audit: AuditTrail, plan: Plan) -> None:
    """One JSON line per candidate, read from the manifest a chunk at a time and written as read:
    memory is one chunk, whatever the plan holds (a document of every candidate would not be)."""
    for chunk in audit.candidates(plan):
        sys.stdout.write("".join(json.dumps({"path": c.path, "bytes": c.size, "reason": c.reason}) + "\n"
                                 for c in chunk))  # fmt: skip
    sys.stdout.flush()


def gc(args: argparse.Namespace) -> Result | int:
    from checkpoint.cleanup import CleanupOptions, GcPlanOptions, apply_cleanup, plan_cleanup, plan_gc

    storage = Storage(args.path)
    audit = trail_of(args, storage)
    request = in_place(args, storage, audit)
    rules = GcPlanOptions(grace_seconds=args.grace, retain_batches=args.retain_batches,
                          quiet_seconds=quiet_seconds(args), allow_short_grace=args.unsafe_short_grace,
                          query_stopped=args.query_stopped)  # fmt: skip

    def plan() -> Plan:  # strict: a plan is built only from a completely read checkpoint
        return plan_gc(request, rules)

    result, replanned = None, False
    if args.candidates:
        _stream_candidates(audit, plan())
        return EXIT_OK
    options = CleanupOptions(plan, what="gc --apply", batch_size=args.batch_size)
    if args.apply:  # planned under the lease, and again when the query moved on meanwhile
        cleaned = apply_cleanup(request, options)
        planned, result, replanned = cleaned.plan, cleaned.result, cleaned.replanned is not None
    else:
        planned = plan_cleanup(request, options).plan
    doc = {"plan": planned.summary(), "plan_file": planned.manifest, "applied": False,
           "replanned": replanned, "deleted": 0, "failed": 0, "skipped": 0}  # fmt: skip
    if result is not None:
        doc.update(applied=True, check=result.check.message, outcomes_file=audit.outcomes_url(planned),
                   **result.summary())  # fmt: skip
    return Result(doc, render.gc_text, EXIT_FINDINGS if doc["failed"] else 0)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gc", help="plan (and with --apply, delete) files no batch will ever read again")
    p.add_argument("path", help=WHERE)
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--apply", action="store_true", help="delete; without it, a dry run that writes the plan only"
    )
    what.add_argument("--candidates", action="store_true",
                      help="a dry run that prints every candidate as a JSON line (path, bytes, "
                      "reason), streamed from the manifest; --json gives the totals and the manifest's "
                      "path")  # fmt: skip
    p.add_argument("--grace", type=duration, default=POLICY.grace_seconds, metavar="DURATION",
                   help=f"only files older than this (default {duration_text(POLICY.grace_seconds)}; "
                   f"below {duration_text(POLICY.min_grace_seconds)} is refused)")  # fmt: skip
    p.add_argument("--retain-batches", type=whole(1), metavar="N",
                   help="keep the last N committed batches (default: all in the commit log)")  # fmt: skip
    quiet_period_option(p)
    p.add_argument("--query-stopped", action="store_true",
                   help="the query is stopped, not merely idle: without it the live-query rules apply "
                   "(two versions of margin; an SST goes only when older than every SST a retained snapshot "
                   "lists), since a running query with no input looks stopped by its logs alone")  # fmt: skip
    p.add_argument("--audit", metavar="URL", help="where plans and outcomes are kept (default: "
                   "_ckpt_audit beside the checkpoint)")  # fmt: skip
    p.add_argument("--batch-size", type=DELETE_BATCH, default=POLICY.delete_batch_size, metavar="N",
                   help=f"keys per delete request (1-{POLICY.delete_batch_size}, "
                   f"default {POLICY.delete_batch_size})")  # fmt: skip
    p.add_argument("--unsafe-short-grace", action="store_true",
                   help=f"allow a grace period under {duration_text(POLICY.min_grace_seconds)}: files of a "
                   "batch being written could be deleted; only for checkpoints nothing writes "
                   "to")  # fmt: skip
    takes_the_lease(p)
    p.set_defaults(run=gc)
