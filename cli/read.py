"""The read-only commands: `inspect`, `lineage`, `validate`, `scan`."""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from checkpoint.analysis import (
    ValidationOptions,
    inspect_summary,
    lineage_document,
    scan_entry,
    validate,
    validate_look,
    validation_document,
)
from checkpoint.errors import CheckpointError
from checkpoint.model import (
    Checkpoint,
    FoundCheckpoint,
    Logs,
    checkpoint_lineage,
    load_census,
    load_head,
    within_deadline,
)
from checkpoint.model import scan as find
from checkpoint.policy import POLICY
from checkpoint.storage import UNPROVEN_LEAVE, Storage

from . import render
from .common import BATCH_ID, EXIT_FINDINGS, WHERE, Result, add_dormant_after, whole


def inspect(args: argparse.Namespace) -> Result:
    # every file counted a page of the listing at a time: memory for its logs, not its history
    return _with_expired(args, Result(inspect_summary(*load_census(args.path)), render.inspect_text))


def lineage(args: argparse.Namespace) -> Result:
    if args.expired and args.batch is not None:
        raise CheckpointError("--expired reads the latest committed batch: leave out --batch", args.path)
    ckpt = load_head(args.path, batches=None if args.batch is None else [args.batch], logs=Logs.RECOVERY)
    entries = checkpoint_lineage(ckpt, args.batch)
    code = EXIT_FINDINGS if any(e.problem for e in entries) else 0
    return _with_expired(args, Result(lineage_document(entries), render.lineage_text, code))


def _with_expired(args: argparse.Namespace, result: Result) -> Result:
    """With `--expired`, the document gains what has expired in its transformWithState stores (a
    store read as recovery reads it, one at a time), and the text its table."""
    from checkpoint.expiry import expired_report

    if not args.expired:
        return result
    doc = {**result.doc, "expired": expired_report(Storage(args.path)).as_dict()}
    return Result(doc, lambda d: f"{result.text(d)}\n{render.expired_text(d['expired'])}", result.exit_code)


def _options(args: argparse.Namespace) -> ValidationOptions:
    return ValidationOptions(deep=getattr(args, "deep", False), long_chain_threshold=args.long_chain,
                             now=time.time(), dormant_seconds=args.dormant_after)  # fmt: skip


def validate_command(args: argparse.Namespace) -> Result:
    validation = validate(load_head(args.path, strict=False, sidecars=args.deep), _options(args))
    code = 0 if validation.ok else EXIT_FINDINGS
    return Result(validation_document(validation), render.validation_text, code)


def scan(args: argparse.Namespace) -> Result:
    storage, found = find(args.root)

    def entry(f: FoundCheckpoint) -> dict[str, Any]:
        ckpt = validation = error = None

        def look(logs: Logs) -> Checkpoint:  # head-first: no state listing, no retained history
            return f.load(storage, strict=False, logs=logs)

        try:
            ckpt, validation = validate_look(look, _options(args))
        except CheckpointError as exc:  # one unreadable checkpoint does not hide the others
            error = str(exc)
        return scan_entry(f.url, ckpt, validation, error)

    def timed_out(f: FoundCheckpoint, timeout: float) -> dict[str, Any]:
        return scan_entry(f.url, None, None, f"no answer in {timeout:g} s: the look was abandoned")

    # One at a time as before (side by side on an object store), each given up after the timeout
    # without an answer: a checkpoint that hangs (a stalled mount) is one row, and the others are
    # read.
    workers = storage.width(POLICY.list_workers)
    timeout = storage.look_timeout()
    done = within_deadline(found, entry, math.inf, workers, time.monotonic, timeout, timed_out)
    entries = list(done.values())
    code = 0 if all(e["health"] == "ok" for e in entries) else EXIT_FINDINGS
    return Result({"root": storage.url, "checkpoints": entries}, render.scan_text, code)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="what a checkpoint holds: format, batches, operators, files")
    p.add_argument("path", help=WHERE)
    p.set_defaults(run=inspect)

    p = sub.add_parser("lineage", help="per store: the replay chain Spark would load, its length and bytes")
    p.add_argument("path", help=WHERE)
    p.add_argument(
        "--batch", type=BATCH_ID, help="a batch still in the commit log (default: the latest committed)"
    )
    p.set_defaults(run=lineage)

    for name in ("inspect", "lineage"):
        sub.choices[name].add_argument(
            "--expired", action="store_true",
            help="also what a TTL has expired, now, in each transformWithState store (reads each store)",
        )  # fmt: skip

    p = sub.add_parser("validate", help="commit log, offset log and state files checked against each other")
    p.add_argument("path", help=WHERE)
    p.add_argument("--deep", action="store_true", help="also decompress every chain file and check its .crc")
    p.set_defaults(run=validate_command)

    p = sub.add_parser("scan", help="every checkpoint under a root, at any depth, with its health")
    p.add_argument("root", help="a folder or URL")
    p.set_defaults(run=scan)

    for name in ("inspect", "lineage", "validate", "scan"):
        sub.choices[name].add_argument(
            "--unproven-storage", action="store_true",
            help="read a store no test here runs against, through fsspec's generic calls (as "
                 f"{UNPROVEN_LEAVE}=1); nothing is ever written there",
        )  # fmt: skip

    for name in ("validate", "scan"):
        sub.choices[name].add_argument(
            "--long-chain", type=whole(1), default=POLICY.long_chain, metavar="N",
            help=f"warn from this replay-chain length ({POLICY.long_chain})",
        )  # fmt: skip
        add_dormant_after(sub.choices[name])
