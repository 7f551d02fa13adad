"""Lineage compaction: which stores to compact (`targets`) and the rebuild of a snapshot for a
store's committed version, replayed, verified and published (`rebuild`). The Spark job that runs
rebuilds in parallel is `jobs.compact`."""

from checkpoint.compaction.hdfs import materialize_snapshot
from checkpoint.compaction.rebuild import RebuildResult, rebuild_store
from checkpoint.compaction.targets import Skip, Target, plan_compaction
from checkpoint.errors import CompactionRefused, RebuildError

__all__ = [
    "CompactionRefused",
    "RebuildError",
    "RebuildResult",
    "Skip",
    "Target",
    "materialize_snapshot",
    "plan_compaction",
    "rebuild_store",
]
