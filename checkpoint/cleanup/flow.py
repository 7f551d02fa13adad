"""Cleanup's apply as `ckpt gc --apply` and the Dagster cleanup asset both run it, under the
checkpoint's lease (`checkpoint.safety.InPlace`): the plan (made now, or by an earlier step without
the lease) checked against the commit log as it is now; when the query moved on since (a new
commit or offset), planned again, because a live query's rules keep more (docs/safety.md: re-plan
or refuse); then applied, the lease checked before each batch of deletions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from checkpoint.cleanup.apply import ApplyResult, Kind, Outcome, apply_plan, check_plan
from checkpoint.policy import POLICY
from checkpoint.safety import InPlace, Plan

log = logging.getLogger(__name__)
# The outcome recorded against a plan that a new one replaced under the lease.
REPLANNED = "superseded: the query moved on since this plan; planned again under the lease"


@dataclass(frozen=True)
class CleanupOptions:
    # Plans the checkpoint (its rules and thresholds are the caller's): called under the lease when
    # no plan is given, and again when the query moved on since `planned`.
    plan: Callable[[], Plan]
    planned: Plan | None = None  # a plan an earlier step made, without the lease
    batch_size: int = POLICY.delete_batch_size
    what: str = "cleanup"  # what the lease says it is held for


@dataclass(frozen=True)
class Cleaned:
    """The plan applied, what the apply did, the plan it replaced when the query moved on, and
    how many older plans the trail let go of (`AuditTrail.prune`)."""

    plan: Plan
    result: ApplyResult
    replanned: Plan | None
    pruned: int = 0


@dataclass(frozen=True)
class Planned:
    """A dry run: the plan written to the trail, nothing deleted, older plans let go of."""

    plan: Plan
    pruned: int


def plan_cleanup(request: InPlace, options: CleanupOptions) -> Planned:
    """A dry run of `apply_cleanup(request, options)`: the plan made and written, then the trail
    pruned as after every plan (no lease: nothing of the checkpoint changes)."""
    made = options.plan()
    return Planned(made, len(request.audit_trail().prune(request.storage.url, made.planned_at)))


def apply_cleanup(request: InPlace, options: CleanupOptions) -> Cleaned:
    """Applies `options.planned` (or, without it, a plan made under the lease) to the checkpoint
    behind `request`, planning again when the query moved on since, then prunes the trail (the
    door's: where the plan's manifest and its outcomes are). Raises GcError when the commit log no
    longer matches the plan, LeaseLost when the lease is taken over."""
    audit, plan = request.audit_trail(), options.plan
    with request.held(options.what) as check:
        current = options.planned if options.planned is not None else plan()
        verdict = check_plan(current, request.storage)
        replanned = None
        if verdict.ok and verdict.moved:
            log.info("%s: %s: planning again under the lease", request.storage.url, verdict.message)
            replanned, current = current, plan()
            audit.record(replanned, [Outcome("-", 0, "-", Kind.SKIPPED, f"{REPLANNED}: {current.manifest}")])
        # A new plan is checked by the apply; the one checked above is not read again.
        result = apply_plan(current, request.storage, audit, batch_size=options.batch_size, check=check,
                            checked=None if replanned else verdict)  # fmt: skip
    pruned = audit.prune(request.storage.url, current.planned_at)
    return Cleaned(current, result, replanned, len(pruned))
