"""Fork, relocate and roll back: a new checkpoint holding exactly what recovery at a batch reads."""

from checkpoint.errors import ForkIncomplete, ForkRefused
from checkpoint.fork.copy import (
    ForkOptions,
    WritePlanOptions,
    check_dest,
    fork_checkpoint,
    inspect_dest,
    write_fork_plan,
)
from checkpoint.fork.markers import ForkResult
from checkpoint.fork.plan import (
    STEP_STATE,
    ForkItem,
    ForkPlan,
    ForkPlanOptions,
    ForkSource,
    plan_fork,
    read_source,
    rewrite_schema_paths,
    source_logs,
)

__all__ = [
    "rewrite_schema_paths",
    "ForkIncomplete",
    "ForkItem",
    "ForkOptions",
    "ForkPlan",
    "ForkPlanOptions",
    "ForkRefused",
    "ForkResult",
    "ForkSource",
    "WritePlanOptions",
    "STEP_STATE",
    "check_dest",
    "fork_checkpoint",
    "inspect_dest",
    "plan_fork",
    "read_source",
    "source_logs",
    "write_fork_plan",
]
