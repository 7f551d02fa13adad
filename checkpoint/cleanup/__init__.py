"""Orphan cleanup, plan -> check -> apply: which files can never be read again (`rules`), one
partition decided by them (`decide`), many at once (`pool`) into local spill files (`spill`), the
plan written as a streamed manifest (`plan`, `manifest`) into the audit trail (`audit`), and the
apply that trusts nothing but the checkpoint (`apply`)."""

from checkpoint.cleanup.apply import ApplyResult, Kind, Outcome, apply_plan, check_plan
from checkpoint.cleanup.audit import AuditTrail
from checkpoint.cleanup.manifest import Plan, PlannedFile
from checkpoint.cleanup.plan import plan_gc

__all__ = [
    "ApplyResult",
    "AuditTrail",
    "Kind",
    "Outcome",
    "Plan",
    "PlannedFile",
    "apply_plan",
    "check_plan",
    "plan_gc",
]
