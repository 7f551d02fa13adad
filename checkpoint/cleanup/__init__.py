"""Orphan cleanup, plan -> check -> apply: which files can never be read again (`rules`), one
partition decided by them (`decide`), many at once (`pool`) into local spill files (`spill`), the
plan written as a streamed manifest (`plan`) into the audit trail (both kept as
`checkpoint.safety` keeps them), the apply that trusts nothing but the checkpoint (`apply`), and
the apply under the lease as both adapters run it, planning again when the query moved on
(`flow`)."""

from checkpoint.cleanup.apply import (
    ApplyResult,
    CheckResult,
    Kind,
    Outcome,
    check_plan,
    delete_with_redrive,
)
from checkpoint.cleanup.flow import REPLANNED, Cleaned, CleanupOptions, Planned, apply_cleanup, plan_cleanup
from checkpoint.cleanup.plan import GcPlanOptions, plan_gc

__all__ = [
    "ApplyResult",
    "CheckResult",
    "Cleaned",
    "CleanupOptions",
    "GcPlanOptions",
    "Planned",
    "Kind",
    "Outcome",
    "REPLANNED",
    "apply_cleanup",
    "plan_cleanup",
    "check_plan",
    "delete_with_redrive",
    "plan_gc",
]
