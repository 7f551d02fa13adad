"""`ckpt`: the maintenance operations for people outside Dagster.

Exit codes: 0 success, 2 the checkpoint cannot be read (a one-line error on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys

from checkpoint.errors import CheckpointError
from checkpoint.model import load_checkpoint
from checkpoint.report import format_inspect, inspect_summary

EXIT_UNREADABLE = 2


def _inspect(args: argparse.Namespace) -> int:
    summary = inspect_summary(load_checkpoint(args.path))
    print(json.dumps(summary, indent=2) if args.json else format_inspect(summary))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckpt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="what a checkpoint holds: format, batches, operators, files")
    p.add_argument("path", help="checkpoint folder: a path or any fsspec URL (file://, s3://, ...)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CheckpointError as exc:
        print(f"ckpt: error: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except KeyboardInterrupt:
        return 130


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
