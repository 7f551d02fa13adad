"""`ckpt`: the maintenance operations for people outside Dagster.

Exit codes: 0 success; 1 `validate`/`scan` found error findings; 2 the checkpoint cannot be read
(a one-line error on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys

from checkpoint.discovery import scan
from checkpoint.errors import CheckpointError
from checkpoint.lineage import checkpoint_lineage
from checkpoint.model import load_checkpoint
from checkpoint.report import (
    format_inspect,
    format_lineage,
    format_scan,
    format_validation,
    inspect_summary,
    lineage_document,
    scan_entry,
    validation_document,
)
from checkpoint.validate import ValidationOptions, validate

EXIT_FINDINGS = 1
EXIT_UNREADABLE = 2


def _emit(args: argparse.Namespace, doc: dict, human) -> None:
    print(json.dumps(doc, indent=2) if args.json else human(doc))


def _inspect(args: argparse.Namespace) -> int:
    _emit(args, inspect_summary(load_checkpoint(args.path)), format_inspect)
    return 0


def _lineage(args: argparse.Namespace) -> int:
    _emit(args, lineage_document(checkpoint_lineage(load_checkpoint(args.path), args.batch)), format_lineage)
    return 0


def _options(args: argparse.Namespace) -> ValidationOptions:
    return ValidationOptions(deep=getattr(args, "deep", False), long_chain_threshold=args.long_chain)


def _validate(args: argparse.Namespace) -> int:
    validation = validate(load_checkpoint(args.path, strict=False), _options(args))
    _emit(args, validation_document(validation), format_validation)
    return 0 if validation.ok else EXIT_FINDINGS


def _scan(args: argparse.Namespace) -> int:
    storage, found = scan(args.root)
    entries = []
    for f in found:
        ckpt = validation = error = None
        try:
            ckpt = f.load(storage, strict=False)
            validation = validate(ckpt, _options(args))
        except CheckpointError as exc:  # one unreadable checkpoint does not hide the others
            error = str(exc)
        entries.append(scan_entry(f.url, ckpt, validation, error))
    _emit(args, {"root": storage.url, "checkpoints": entries}, format_scan)
    return 0 if all(e["health"] == "ok" for e in entries) else EXIT_FINDINGS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckpt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    where = "checkpoint folder: a path or any fsspec URL (file://, s3://, ...)"

    p = sub.add_parser("inspect", help="what a checkpoint holds: format, batches, operators, files")
    p.add_argument("path", help=where)
    p.set_defaults(run=_inspect)

    p = sub.add_parser("lineage", help="per store: the replay chain Spark would load, its length and bytes")
    p.add_argument("path", help=where)
    p.add_argument(
        "--batch", type=int, help="a batch still in the commit log (default: the latest committed)"
    )
    p.set_defaults(run=_lineage)

    p = sub.add_parser("validate", help="commit log, offset log and state files checked against each other")
    p.add_argument("path", help=where)
    p.add_argument("--deep", action="store_true", help="also decompress every chain file and check its .crc")
    p.set_defaults(run=_validate)

    p = sub.add_parser("scan", help="every checkpoint under a root, at any depth, with its health")
    p.add_argument("root", help="a folder or any fsspec URL")
    p.set_defaults(run=_scan)

    for name in ("validate", "scan"):
        sub.choices[name].add_argument(
            "--long-chain", type=int, default=10, metavar="N", help="warn from this replay-chain length (10)"
        )
    for command in sub.choices.values():
        command.add_argument("--json", action="store_true", help="machine-readable output")
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
