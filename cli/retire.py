"""`ckpt retire`: plan the retirement of a dormant checkpoint; `--apply MANIFEST`, after the grace
period, archive it and delete it."""

from __future__ import annotations

import argparse
import getpass
import socket
import time
from typing import Any

from checkpoint.analysis import human_bytes, utc_minute
from checkpoint.errors import RetirementRefused
from checkpoint.policy import POLICY, duration_text
from checkpoint.storage import Storage

from .common import (
    DELETE_BATCH,
    WHERE,
    Result,
    add_dormant_after,
    duration,
    leased,
    takes_the_lease,
    trail_of,
)


def retire(args: argparse.Namespace) -> Result:
    from checkpoint.retire import RetirementPlanOptions, plan_retirement, retirement_request

    if args.apply:
        return _apply(args)
    if args.archive is None and not args.no_archive:
        raise RetirementRefused("name an archive (--archive URL), or say --no-archive to delete without one: "
                                "nothing planned", args.target)  # fmt: skip
    storage = Storage(args.target)
    trail = trail_of(args, storage)
    archive = None if args.no_archive else Storage(args.archive)
    request = retirement_request(storage, archive, lambda storage, what: leased(args, storage, what), trail)
    options = RetirementPlanOptions(dormant_seconds=args.dormant_after, allow_short=args.unsafe_short_grace)
    plan = plan_retirement(request, options)
    doc = {**plan.summary(), "applied": False, "applies_from": plan.planned_at + POLICY.retire_grace_seconds}
    return Result(doc, _plan_text)


def _apply(args: argparse.Namespace) -> Result:
    from checkpoint.retire import RetireOptions, apply_retirement, read_retirement, retirement_request

    trail, plan = read_retirement(args.target)
    archive = None if plan.archive is None else Storage(plan.archive)
    who = f"{getpass.getuser()}@{socket.gethostname()} (ckpt retire --apply)"
    options = RetireOptions(plan, time.time(), grace_seconds=args.grace,
                            allow_short_grace=args.unsafe_short_grace, batch_size=args.batch_size,
                            approved_by=who)  # fmt: skip
    request = retirement_request(
        Storage(plan.checkpoint), archive, lambda storage, what: leased(args, storage, what), trail
    )
    retired = apply_retirement(request, options)
    return Result({**retired.as_dict(), "applied": True}, _applied_text)


def _plan_text(doc: dict[str, Any]) -> str:
    evidence = doc["evidence"]
    archive = (
        f"archive: {doc['archive']}" if doc["archive"] else "no archive (--no-archive): deleted for good"
    )
    return "\n".join([
        f"{doc['checkpoint']}: dormant since {utc_minute(evidence['dormant_since'])} (last commit: batch "
        f"{evidence['last_commit']}, last offset: batch {evidence['last_offset']})",
        f"retirement planned: {doc['files']} files, {human_bytes(doc['bytes'])}; {archive}",
        f"manifest: {doc['manifest']}",
        f"nothing deleted: apply it from {utc_minute(doc['applies_from'])} with "
        f"`ckpt retire --apply {doc['manifest']}`",
    ])  # fmt: skip


def _applied_text(doc: dict[str, Any]) -> str:
    if doc["already_retired"]:
        return f"{doc['checkpoint']}: already retired by plan {doc['plan_id']}; nothing done"
    where = (f"archived at batch {doc['archived_batch']} in {doc['archive']}; " if doc["archive"]
             else "no archive; ")  # fmt: skip
    return "\n".join([
        f"{doc['checkpoint']}: retired. {where}this run deleted {doc['deleted_files']} files "
        f"({human_bytes(doc['deleted_bytes'])}) in {doc['seconds']} s and {doc['requests']} requests",
        f"outcomes: {doc['outcomes']}",
    ])  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("retire", help="plan the retirement of a dormant checkpoint (archive, then delete); "
                       "--apply MANIFEST applies a plan after its grace period")  # fmt: skip
    p.add_argument("target", metavar="PATH | MANIFEST",
                   help=f"{WHERE}; with --apply, the manifest a plan named")  # fmt: skip
    p.add_argument("--apply", action="store_true",
                   help="archive and delete as the manifest says, once its grace has passed and the "
                   "checkpoint is still as planned")  # fmt: skip
    where = p.add_mutually_exclusive_group()
    where.add_argument("--archive", metavar="URL",
                       help="plan: an empty folder or URL the latest committed batch is forked to before the "
                       "checkpoint is deleted (`ckpt fork URL DEST` brings the query back)")  # fmt: skip
    where.add_argument("--no-archive", action="store_true", help="plan: delete without an archive")
    add_dormant_after(p)
    p.add_argument("--audit", metavar="URL", help="plan: where the manifest is kept (default: "
                   "_ckpt_audit beside the checkpoint)")  # fmt: skip
    p.add_argument("--grace", type=duration, default=POLICY.retire_grace_seconds, metavar="DURATION",
                   help="apply: only this long after the plan (default "
                   f"{duration_text(POLICY.retire_grace_seconds)}; under "
                   f"{duration_text(POLICY.min_retire_grace_seconds)} only with "
                   "--unsafe-short-grace)")  # fmt: skip
    p.add_argument("--unsafe-short-grace", action="store_true",
                   help="plan: accept a dormancy under the floor of "
                   f"{duration_text(POLICY.min_dormant_seconds)}; apply: a grace under its floor (nobody "
                   "had the time to object)")  # fmt: skip
    p.add_argument("--batch-size", type=DELETE_BATCH, default=POLICY.delete_batch_size, metavar="N",
                   help=f"apply: keys per delete request (1-{POLICY.delete_batch_size})")  # fmt: skip
    takes_the_lease(p)
    p.set_defaults(run=retire)
