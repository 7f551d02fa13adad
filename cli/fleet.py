"""`ckpt fleet`: one row per checkpoint under the roots, most urgent first."""

from __future__ import annotations

import argparse
from typing import Any

from checkpoint.discovery import scan
from checkpoint.errors import CheckpointError
from checkpoint.fleet import fleet_row, needs_attention, ranked, unreadable_row
from checkpoint.gc_plan import GcError, plan_gc
from checkpoint.model import load_checkpoint

from . import render
from .common import EXIT_FINDINGS, Result


def fleet(args: argparse.Namespace) -> Result:
    rows = []
    for root in args.roots:
        storage, found = scan(root)
        for f in found:
            known: dict[str, Any] = {}
            try:
                if not args.no_cleanup_plan:  # what a dry-run cleanup with the default grace finds
                    known["reclaimable_bytes"] = _reclaimable(f.url)
                rows.append(fleet_row(f.url, f.load(storage, strict=False), **known))
            except CheckpointError as exc:  # one unreadable checkpoint is a row, never the end
                rows.append(unreadable_row(f.url, f.url, str(exc), **known))
    rows = ranked(rows)
    attention = [(a.row.url, a.reason, a.action) for a in needs_attention(rows)]
    code = EXIT_FINDINGS if any(r.errors for r in rows) else 0
    return Result(
        {"checkpoints": [r.as_dict() for r in rows]}, lambda d: render.fleet_text(d, attention), code
    )


def _reclaimable(url: str) -> int | None:
    """The bytes a dry-run cleanup plan with the default grace would delete: it lists every file,
    which only cleanup planning needs; None when cleanup refuses to plan this checkpoint."""
    try:
        return plan_gc(load_checkpoint(url, listing="auto")).bytes
    except GcError:
        return None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="one row per checkpoint under the roots, most urgent first")
    p.add_argument("roots", nargs="+", help="folders or fsspec URLs holding checkpoints at any depth")
    p.add_argument("--no-cleanup-plan", action="store_true",
                   help="skip the dry-run cleanup plans (each lists all of its checkpoint)")  # fmt: skip
    p.set_defaults(run=fleet)
