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
from checkpoint.cleanup.audit import AuditTrail
from checkpoint.cleanup.manifest import Plan
from checkpoint.policy import POLICY
from checkpoint.safety import InPlace

log = logging.getLogger(__name__)
# The outcome recorded against a plan that a new one replaced under the lease.
REPLANNED = "superseded: the query moved on since this plan; planned again under the lease"


@dataclass(frozen=True)
class Cleaned:
    """The plan applied, what the apply did, and the plan it replaced when the query moved on."""

    plan: Plan
    result: ApplyResult
    replanned: Plan | None


def apply_cleanup(
    request: InPlace,
    audit: AuditTrail,
    plan: Callable[[], Plan],
    *,
    what: str,
    planned: Plan | None = None,
    batch_size: int = POLICY.delete_batch_size,
) -> Cleaned:
    """Applies `planned` (or, without it, a plan made under the lease by `plan`) to the checkpoint
    behind `request`, planning again with `plan` when the query moved on since. Raises GcError
    when the commit log no longer matches the plan, LeaseLost when the lease is taken over."""
    with request.held(what) as check:
        current = planned if planned is not None else plan()
        verdict = check_plan(current, request.storage)
        replanned = None
        if verdict.ok and verdict.moved:
            log.info("%s: %s: planning again under the lease", request.storage.url, verdict.message)
            replanned, current = current, plan()
            audit.record(replanned, [Outcome("-", 0, "-", Kind.SKIPPED, f"{REPLANNED}: {current.manifest}")])
        # A new plan is checked by the apply; the one checked above is not read again.
        result = apply_plan(current, request.storage, audit, batch_size=batch_size, check=check,
                            checked=None if replanned else verdict)  # fmt: skip
    return Cleaned(current, result, replanned)
