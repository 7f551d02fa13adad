"""`ckpt purge-expired`: a stopped transformWithState query's expired state taken out of its latest
snapshot, as Spark's next batch would; `--report` only says what has expired (as `ckpt lineage
--expired` does)."""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone

from checkpoint import bounds
from checkpoint.storage import Storage

from . import render
from .common import (
    WHERE,
    Result,
    in_place,
    master_option,
    quiet_period_option,
    quiet_seconds,
    takes_the_lease,
    trail_of,
)


def instant(text: str) -> float:
    """A time as ISO 8601 (`2026-11-20T08:00:00Z`; no zone: UTC) or seconds since the epoch, between
    1970 and 2200."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither ISO 8601 nor seconds since the epoch"
            ) from exc
        seconds = (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()
    try:
        return bounds.instant(seconds, "it")
    except bounds.OutOfRange as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: {exc} (1970 to 2200)") from exc


def purge_command(args: argparse.Namespace) -> Result:
    from checkpoint.expiry import PurgeOptions, expired_report, purge_expired

    storage = Storage(args.path)
    if args.report:
        return Result(expired_report(storage, PurgeOptions(args.as_of)).as_dict(), render.expired_text)
    from jobs.expiry import spark_purges  # Spark starts only for a purge, once its stores are planned
    from jobs.spark_session import session_for

    request = in_place(args, storage, trail_of(args, storage))
    options = PurgeOptions(args.as_of, quiet_seconds(args), now=time.time(),
                           run=spark_purges(lambda: session_for(args.master)))  # fmt: skip
    return Result(purge_expired(request, options).as_dict(), render.expired_text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("purge-expired", help="take a stopped transformWithState query's expired TTL state "
                       "out of its latest snapshot")  # fmt: skip
    p.add_argument("path", help=WHERE)
    p.add_argument("--as-of", type=instant, metavar="TIME",
                   help="what expired at this time (ISO 8601 or epoch seconds; default now, and never "
                   "later; for a query stopped mid-batch, that batch's own time, never later)")  # fmt: skip
    p.add_argument("--report", action="store_true", help="only report what has expired: nothing is written "
                   "and no lease is taken")  # fmt: skip
    quiet_period_option(p)
    master_option(p, " of the purge, a task a store")
    p.add_argument("--audit", metavar="URL", help="where the purge's record goes (default: the checkpoint's "
                   "audit trail, _ckpt_audit beside it)")  # fmt: skip
    takes_the_lease(p)
    p.set_defaults(run=purge_command)
