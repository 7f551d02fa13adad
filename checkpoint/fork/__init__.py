"""Fork, relocate and roll back: a new checkpoint holding exactly what recovery at a batch reads."""

from checkpoint.errors import ForkIncomplete, ForkRefused
from checkpoint.fork.copy import apply_fork, check_dest, fork, fork_checkpoint, inspect_dest
from checkpoint.fork.markers import ForkResult
from checkpoint.fork.plan import (
    STEP_STATE,
    ForkItem,
    ForkPlan,
    ForkSource,
    plan_fork,
    read_source,
    source_logs,
)

__all__ = [
    "ForkIncomplete",
    "ForkItem",
    "ForkPlan",
    "ForkRefused",
    "ForkResult",
    "ForkSource",
    "STEP_STATE",
    "apply_fork",
    "check_dest",
    "fork",
    "fork_checkpoint",
    "inspect_dest",
    "plan_fork",
    "read_source",
    "source_logs",
]
