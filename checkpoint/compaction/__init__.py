"""Lineage compaction: which stores to compact (`targets`), the rebuild of a snapshot for a
store's committed version, replayed, verified and published (`rebuild`, `hdfs`), and the flow both
adapters run (`flow`: the leases, the head read, the plans, the injected rebuild). The Spark job that
runs rebuilds in parallel is `jobs.compact`."""

from checkpoint.compaction.flow import (
    Compaction,
    CompactionOptions,
    Planned,
    Task,
    compact_checkpoints,
    tasks_for,
)
from checkpoint.compaction.hdfs import materialize_snapshot
from checkpoint.compaction.rebuild import RebuildResult, Rewrite, Rewritten, rebuild_store, rewrite_store
from checkpoint.compaction.targets import (
    CompactionPlan,
    CompactionPlanOptions,
    Skip,
    Target,
    Why,
    plan_compaction,
)
from checkpoint.errors import CompactionRefused, RebuildError

__all__ = [
    "Compaction",
    "CompactionOptions",
    "CompactionPlan",
    "CompactionPlanOptions",
    "CompactionRefused",
    "Planned",
    "RebuildError",
    "RebuildResult",
    "Rewrite",
    "Rewritten",
    "Skip",
    "Target",
    "Why",
    "Task",
    "compact_checkpoints",
    "materialize_snapshot",
    "plan_compaction",
    "rebuild_store",
    "rewrite_store",
    "tasks_for",
]
