"""Cleanup plans in tests: planned into an audit trail (a temporary one unless given), and their
candidates read back from the manifest, as the apply reads them."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from checkpoint.cleanup.audit import AuditTrail
from checkpoint.cleanup.manifest import Plan, PlannedFile
from checkpoint.cleanup.plan import plan_gc
from checkpoint.storage import Storage

# The trails of plans made without one, in one folder removed when the worker exits: one folder
# each, left in the system's temporary folder, came to 72 a run.
_TRAILS = tempfile.TemporaryDirectory(prefix="ckpt-audit-")


def plan_of(where: Path | str | Storage, audit: AuditTrail | None = None, **kwargs: Any) -> Plan:
    """Planned as for a query known to be stopped (the corpus' are), unless told otherwise: the
    quiet period alone then decides which rules apply, as the scenarios expect."""
    kwargs.setdefault("query_stopped", True)
    storage = where if isinstance(where, Storage) else Storage(str(where))
    return plan_gc(storage, audit or AuditTrail(tempfile.mkdtemp(dir=_TRAILS.name)), **kwargs)


def candidates_of(plan: Plan, audit: AuditTrail | None = None) -> list[PlannedFile]:
    """Every candidate, in manifest order; `audit` for a trail that needs storage options."""
    trail = plan.manifest.rsplit("/", 2)[0]  # <trail>/<checkpoint's folder>/<plan id>.plan.jsonl
    return [c for chunk in (audit or AuditTrail(trail)).candidates(plan) for c in chunk]
