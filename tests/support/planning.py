"""Cleanup plans in tests: planned into an audit trail (a temporary one unless given), their
candidates read back from the manifest, as the apply reads them, and applied under no lease."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from checkpoint.cleanup.apply import ApplyResult, apply_plan
from checkpoint.cleanup.plan import plan_gc
from checkpoint.safety import AuditTrail, Plan, PlannedFile
from checkpoint.storage import Storage

# The trails of plans made without one, in one folder removed when the worker exits: one folder
# each, left in the system's temporary folder, came to 72 a run.
_TRAILS = tempfile.TemporaryDirectory(prefix="ckpt-audit-")
# The test clock: seven hours from now, so every corpus file is past the default 6 h grace.
LATER = 7 * 3600


def plan_of(where: Path | str | Storage, audit: AuditTrail | None = None, **kwargs: Any) -> Plan:
    """Planned as for a query known to be stopped (the corpus' are), unless told otherwise: the
    quiet period alone then decides which rules apply, as the scenarios expect."""
    kwargs.setdefault("query_stopped", True)
    storage = where if isinstance(where, Storage) else Storage(str(where))
    return plan_gc(storage, audit or AuditTrail(tempfile.mkdtemp(dir=_TRAILS.name)), **kwargs)


def plan_later(where: Path | str | Storage, **kwargs: Any) -> Plan:
    """Planned seven hours from now (`LATER`)."""
    return plan_of(where, now=time.time() + LATER, **kwargs)


def candidates_of(plan: Plan, audit: AuditTrail | None = None) -> list[PlannedFile]:
    """Every candidate, in manifest order; `audit` for a trail that needs storage options."""
    trail = plan.manifest.rsplit("/", 2)[0]  # <trail>/<checkpoint's folder>/<plan id>.plan.jsonl
    return [c for chunk in (audit or AuditTrail(trail)).candidates(plan) for c in chunk]


def apply_unleased(plan: Plan, storage: Storage, audit: AuditTrail, **kwargs: Any) -> ApplyResult:
    """The apply alone, under no lease: what the tests of its deletions count, without the door's
    lease files (the door is tested through `apply_cleanup`, the CLI and Dagster)."""
    return apply_plan(plan, storage, audit, check=lambda: None, **kwargs)


def manifest_lines(manifest: str, plan_id: str) -> list[bytes]:
    """A local manifest's lines, its plan id masked: two plans of one checkpoint compare equal
    when they planned the same, in the same order."""
    head, *lines = Path(manifest.removeprefix("file://")).read_bytes().splitlines()
    return [head.replace(plan_id.encode(), b"<id>"), *lines]
