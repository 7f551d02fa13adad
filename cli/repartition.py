"""`ckpt state-profile` and `ckpt repartition`: choose a query's state partition count, then change
it with Spark's repartitioner, guarded, proven and reversible."""

from __future__ import annotations

import argparse

from checkpoint.errors import Refused
from checkpoint.model import load_head
from checkpoint.policy import POLICY
from checkpoint.storage import Storage

from . import render
from .common import (
    EXIT_FINDINGS,
    WHERE,
    Result,
    in_place,
    master_option,
    quiet_period_option,
    quiet_seconds,
    takes_the_lease,
    trail_of,
    whole,
)


def state_profile(args: argparse.Namespace) -> Result:
    from checkpoint.repartition import head_profile

    ckpt = load_head(Storage(args.path), recent=1)
    doc = head_profile(ckpt)
    if args.candidates:
        from jobs.repartition import predict  # Spark starts only when counts are to be predicted
        from jobs.spark_session import session_for

        doc["predicted"] = predict(session_for(args.master), ckpt, args.candidates)
    refused = any(not p["self_check"]["ok"] for p in doc.get("predicted", []))
    return Result(doc, render.profile_text, EXIT_FINDINGS if refused else 0)


def repartition_command(args: argparse.Namespace) -> Result | int:
    from checkpoint.repartition import (
        RepartitionOptions,
        UndoOptions,
        repartition_checkpoint,
        undo_repartition,
    )
    from jobs.repartition import spark_engine
    from jobs.spark_session import session_for

    storage = Storage(args.path)
    request = in_place(args, storage, trail_of(args, storage))
    if args.undo:
        undo = UndoOptions(quiet_seconds(args), args.query_stopped, what="repartition")
        undone = undo_repartition(request, undo)
        return Result(undone.as_dict(), render.repartition_text)
    if args.partitions is None:
        raise Refused("--partitions N is required (or --undo)")
    engine = spark_engine(lambda: session_for(args.master))  # Spark starts once preflight passed
    options = RepartitionOptions(args.partitions, engine, quiet_seconds=quiet_seconds(args))
    result = repartition_checkpoint(request, options)
    return Result(result.as_dict(), render.repartition_text)


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(c) for c in text.split(",") if c.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a comma-separated list of partition counts: {exc}") from exc
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("partition counts must be at least 1")
    return counts


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("state-profile", help="keys and bytes per state partition, skew, and (with "
                       "--candidates) the keys each partition would hold under other counts")  # fmt: skip
    p.add_argument("path", help=WHERE)
    p.add_argument("--candidates", type=_counts, metavar="N,N,...",
                   help="partition counts to predict with Spark's own hash (starts Spark)")  # fmt: skip
    master_option(p)
    p.set_defaults(run=state_profile)

    p = sub.add_parser("repartition", help="change a stopped query's state partition count with Spark's "
                       "repartitioner: preflight, backup, rewrite, proof, undo on failure")  # fmt: skip
    p.add_argument("path", help=WHERE)
    p.add_argument(
        "--partitions",
        type=whole(1, POLICY.max_state_partitions),
        metavar="N",
        help="the new state partition count",
    )
    p.add_argument("--undo", action="store_true",
                   help="take back the newest repartition while its batch is still the latest")  # fmt: skip
    quiet_period_option(p)
    p.add_argument("--query-stopped", action="store_true",
                   help="with --undo: the query is stopped, so the repartition's batch may be undone "
                   "before the quiet period has passed")  # fmt: skip
    p.add_argument("--audit", metavar="URL", help="where the records and the backup fork go (default: "
                   "_ckpt_audit beside the checkpoint)")  # fmt: skip
    master_option(p)
    takes_the_lease(p)
    p.set_defaults(run=repartition_command)
