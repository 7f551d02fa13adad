"""`ckpt rehearse`: will this query restart on this checkpoint, under this Spark? Spark answers, on
a scratch fork; the checkpoint is only read."""

from __future__ import annotations

import argparse
import signal

from checkpoint.policy import POLICY, duration_text
from checkpoint.safety import InPlace
from checkpoint.storage import Storage

from . import render
from .common import (
    BATCH_ID,
    WHERE,
    Result,
    duration,
    leased,
    master_option,
    takes_the_lease,
    terminated,
    whole,
)


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key.strip(), value


def rehearse_command(args: argparse.Namespace) -> Result:
    from checkpoint.rehearsal import RehearsalOptions, rehearse
    from jobs.rehearse import in_process, in_python, load_query  # Spark starts once the scratch is forked
    from jobs.spark_session import session_for

    src = Storage(args.checkpoint)
    if not args.python:  # a module this interpreter cannot import is refused before Spark starts
        load_query(args.query)
    run = (
        in_python(args.python, args.master)
        if args.python
        else in_process(lambda: session_for(args.master), src)
    )
    options = RehearsalOptions(run, args.query, args.batch, dict(args.conf), keep=args.keep,
                               scratch_dir=args.scratch_dir, workers=args.workers,
                               timeout_seconds=args.timeout)  # fmt: skip
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        result = rehearse(InPlace(src, lambda storage, what: leased(args, storage, what)), options)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return Result(result.as_dict(), render.rehearse_text, result.exit_code)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rehearse", help="replay a committed batch on a scratch fork under the query's code "
                       "and this Spark, and compare the state with the checkpoint's")  # fmt: skip
    p.add_argument("checkpoint", help=WHERE)
    p.add_argument("--query", required=True, metavar="MODULE:FUNCTION",
                   help="a function that takes a SparkSession and returns the query's DataStreamWriter "
                   "(df.writeStream...), as the deployment builds it; its sink is replaced by one that "
                   "writes nothing")  # fmt: skip
    p.add_argument(
        "--batch", type=BATCH_ID, help="the committed batch to replay (default: the latest committed)"
    )
    p.add_argument("--python", metavar="PATH", help="run Spark in this interpreter (another PySpark: an "
                   "upgrade or a rollback); it needs this project's dependencies")  # fmt: skip
    p.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark conf the deployment sets (repeatable)")  # fmt: skip
    p.add_argument("--keep", action="store_true", help="keep the scratch fork (it is printed)")
    p.add_argument("--scratch-dir", metavar="DIR", help="where the local scratch fork goes (default: the "
                   "system's temporary folder)")  # fmt: skip
    p.add_argument("--workers", type=whole(1, 256), default=POLICY.fork_workers, metavar="N",
                   help=f"files copied at once (default {POLICY.fork_workers})")  # fmt: skip
    p.add_argument("--timeout", type=duration, default=POLICY.rehearsal_timeout_seconds, metavar="DURATION",
                   help="the time the query's function, the batch and the comparison may take in all "
                   f"(default {duration_text(POLICY.rehearsal_timeout_seconds)}); past it the outcome "
                   "says what was running, exit 6")  # fmt: skip
    master_option(p)
    takes_the_lease(p)
    p.set_defaults(run=rehearse_command)
