"""`ckpt fleet`: one row per checkpoint under the roots, most urgent first."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any

from checkpoint.analysis import (
    FleetRow,
    look_at,
    needs_attention,
    printable,
    ranked,
    spark_line,
    totals,
    unreadable_row,
    with_held,
)
from checkpoint.errors import CheckpointError, GcError, UnknownSparkVersion
from checkpoint.model import each_checkpoint, scan
from checkpoint.policy import POLICY, Policy
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.storage import Storage

from . import render
from .common import EXIT_FINDINGS, Result, add_dormant_after


def fleet(args: argparse.Namespace) -> Result:
    found: list[str] = []
    width, timeout = 1, POLICY.look_timeout_seconds
    for root in args.roots:
        storage, checkpoints = scan(root)
        found += [f.url for f in checkpoints]
        width = max(width, storage.width(POLICY.fleet_workers))
        timeout = max(timeout, storage.look_timeout())
    cleanup = None if args.no_cleanup_plan else ("fresh" if args.plan else "newest")
    rows = ranked(
        each_checkpoint(
            functools.partial(_row, cleanup=cleanup, target=args.target_spark, expired=args.expired,
                              policy=dataclasses.replace(POLICY, dormant_seconds=args.dormant_after)), found,
            width=width, timed_out=_timed_out, timeout=timeout,
        )
    )  # fmt: skip
    if args.held:
        # After the looks, which are bounded in time: a listing takes what the checkpoint holds
        # (a minute and more at 10^7 files), so it is no look's to make.
        rows = [with_held(r, Storage(r.url), listing=True) if r.held_unknown else r for r in rows]
    attention = printable([(a.row.url, a.reason, a.action) for a in needs_attention(rows)])
    code = EXIT_FINDINGS if any(r.errors for r in rows) else 0
    doc: dict[str, Any] = {"checkpoints": [r.as_dict() for r in rows]}
    if args.target_spark:
        doc["readiness"] = totals(rows, args.target_spark).readiness
    return Result(doc, lambda d: render.fleet_text(d, attention), code)


def _row(
    url: str, cleanup: str | None, target: str | None = None, policy: Policy = POLICY, expired: bool = False
) -> FleetRow:
    """One checkpoint's row; module-level, with plain arguments, so that a worker process can be
    given it."""
    try:
        known = {} if cleanup is None else _reclaimable(url, fresh=cleanup == "fresh")
        known |= _expired(url) if expired else {}
    except CheckpointError as exc:  # its audit trail or a store cannot be read: a row that says so
        return unreadable_row(url, url, str(exc))
    # a dormant checkpoint's bytes, as its audit trail knows them (`--held` lists the others after)
    return with_held(look_at(url, url, None, policy, known, target), Storage(url))


def _timed_out(url: str, timeout: float) -> FleetRow:
    return unreadable_row(url, url, f"no answer in {timeout:g} s: the look was abandoned")


def _reclaimable(url: str, *, fresh: bool) -> dict[str, Any]:
    """The bytes the newest cleanup plan in the checkpoint's audit trail found, and when it was
    made: one listing of its folder and one small read. With `fresh`, a dry-run plan with the
    default grace is made first (it lists every file, and is kept in the audit trail like any
    plan). None when there is no plan, when the newest was applied, or cleanup refuses to plan
    this checkpoint."""
    from checkpoint.cleanup import plan_gc

    storage = Storage(url)
    audit = AuditTrail(AuditTrail.default_for(storage.url))
    try:
        # The plan takes no lease: the request's way of taking one is never called.
        plan = (
            plan_gc(InPlace(storage, taken_at_once("ckpt fleet"), audit))
            if fresh
            else audit.latest_plan(storage.url, applied=False)
        )
    except GcError:
        plan = None
    if plan is None:
        return {}
    return {"reclaimable_bytes": plan.total_bytes, "reclaimable_planned_at": plan.planned_at}


def _expired(url: str) -> dict[str, Any]:
    """What a TTL has expired now in its transformWithState stores, each read as its recovery reads
    it; nothing for a checkpoint without such a store."""
    from checkpoint.expiry import expired_report

    doc = expired_report(Storage(url)).as_dict()
    return {k: doc[k] for k in ("expired", "expired_share", "expired_bytes")} if doc["stores"] else {}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="one row per checkpoint under the roots, most urgent first")
    p.add_argument("roots", nargs="+", help="folders or URLs holding checkpoints at any depth")
    p.add_argument("--plan", action="store_true",
                   help="make a fresh dry-run cleanup plan of each checkpoint (each lists all of its "
                   "checkpoint); default: the reclaimable bytes of the newest plan in its audit "
                   "trail, with its age")  # fmt: skip
    p.add_argument("--no-cleanup-plan", action="store_true",
                   help="show no reclaimable bytes at all")  # fmt: skip
    p.add_argument("--expired", action="store_true",
                   help="also what a TTL has expired in each transformWithState store (reads each such "
                   "store as its recovery does)")  # fmt: skip
    p.add_argument("--held", action="store_true",
                   help="also list each dormant checkpoint whose bytes its audit trail does not know yet "
                   "(once per dormancy, kept there; a retirement plan keeps them too); default: only "
                   "what the trails know")  # fmt: skip
    add_dormant_after(p)
    p.add_argument("--target-spark", type=_line, metavar="VERSION",
                   help="also whether Spark VERSION (4.0 to 4.3) restarts each checkpoint, from its metadata "
                   "(docs/format.md, upgrade readiness), and a count")  # fmt: skip
    p.set_defaults(run=fleet)


def _line(version: str) -> str:
    try:
        return spark_line(version)
    except UnknownSparkVersion as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
