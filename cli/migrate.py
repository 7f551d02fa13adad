"""`ckpt migrate`: a new checkpoint on RocksDB format V2 with the state of a checkpoint in Spark's
default formats (the HDFS-backed store, RocksDB format V1)."""

from __future__ import annotations

import argparse

from checkpoint.storage import Storage

from . import render
from .common import (
    BATCH_ID,
    WHERE,
    Result,
    master_option,
    quiet_period_option,
    quiet_seconds,
    takes_the_lease,
    trail_of,
    two_sided,
)


def migrate_command(args: argparse.Namespace) -> Result:
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from jobs.migrate import spark_ports  # Spark starts only once the preflight passed
    from jobs.spark_session import session_for

    src = Storage(args.source)
    request = two_sided(args, src, Storage(args.dest), trail_of(args, src))
    ports = spark_ports(lambda: session_for(args.master))
    options = MigrationOptions(ports, batch=args.batch, quiet_seconds=quiet_seconds(args))
    result = migrate_checkpoint(request, options)
    return Result(result.as_dict(), render.migrate_text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("migrate", help="a new checkpoint on RocksDB format V2 carrying the state of one in "
                       "Spark's default formats")  # fmt: skip
    p.add_argument("source", help=WHERE)
    p.add_argument("dest", help="an empty folder or URL")
    p.add_argument("--batch", type=BATCH_ID, help="a committed batch (default: the latest committed)")
    quiet_period_option(p)
    master_option(p)
    p.add_argument("--audit", metavar="URL", help="where the migration's record goes (default: the "
                   "source's audit trail, _ckpt_audit beside it)")  # fmt: skip
    takes_the_lease(p)
    p.set_defaults(run=migrate_command)
