"""`ckpt`: the maintenance operations for people outside Dagster.

Exit codes: 0 success; 1 `validate`/`scan` found error findings, `gc --apply`/`compact` failed on
some file or store, a fork, migration or retirement stopped part-way (run it again to finish), a
repartition failed and was undone, or a state profile's self-check failed; 2 the checkpoint cannot
be read, the cleanup, compaction, fork, migration, repartition, retirement or purge was refused, or
another action holds the checkpoint's maintenance lease (a one-line error on stderr naming it, no
traceback); `rehearse` alone: 3 the query's function raised, 4 it called exit, 5 it started a
query, 6 the time limit passed; 130 SIGINT, 143 SIGTERM (what the command made is removed).

"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from checkpoint.analysis import printable
from checkpoint.errors import CheckpointError, Stopped
from checkpoint.storage import UNPROVEN_LEAVE

from . import compact, expiry, fleet, fork, gc, migrate, read, rehearse, repartition, retire
from .common import EXIT_FINDINGS, EXIT_UNREADABLE, Result, Terminated
from .progress import shown

# Each family imports its action's package (and Spark's jobs) inside the function that runs it,
# so a command loads the core and its own code only: every `ckpt` process pays its imports, and a
# `ckpt lineage` of a small checkpoint is mostly that (0.45 s of CPU with every action's, 0.3 without).
FAMILIES = (read, fleet, gc, compact, expiry, fork, migrate, repartition, rehearse, retire)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckpt", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.register(sub)
    for command in sub.choices.values():
        command.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


# Store clients that log a failure, traceback and all, before they raise it (gcsfs' "out of
# retries"): the error reaches the terminal once, as the command's one line.
_QUIET_CLIENTS = ("gcsfs", "adlfs", "azure")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "unproven_storage", False):
        os.environ[UNPROVEN_LEAVE] = "1"  # in the environment: the command's worker processes read it too
    for name in _QUIET_CLIENTS:
        logging.getLogger(name).addHandler(logging.NullHandler())
    with shown(sys.stderr, quiet=args.json) as progress:
        try:
            result: Result | int = args.run(args)
        except Stopped as exc:  # part-way: marked or put back, and a re-run finishes it
            progress.finish()
            print(f"ckpt: {exc.label}: {printable(str(exc))}", file=sys.stderr)
            return EXIT_FINDINGS
        except CheckpointError as exc:  # refused, unreadable: nothing was changed
            progress.finish()
            print(f"ckpt: error: {printable(str(exc))}", file=sys.stderr)
            return EXIT_UNREADABLE
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM where a command turns it into this
            progress.finish()
            return 143 if isinstance(exc, Terminated) else 130
        progress.finish()
    if isinstance(result, int):
        return result
    try:
        # Text escapes the control characters of every name it prints; JSON escapes them itself.
        print(
            json.dumps(result.doc, indent=2) if args.json else result.text(printable(result.doc)), flush=True
        )
    except BrokenPipeError:
        # The reader went away (`ckpt lineage PATH | head -5`): quiet, as a tool killed by SIGPIPE
        # is, and with its status. Python would report the pipe again when it flushes at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return result.exit_code


EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
