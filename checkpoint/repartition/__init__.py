"""Changing a stopped query's state partition count: the guards around Spark's repartitioner
(`guards`), the typed records it leaves in the audit trail (`records`) and the guarded flow
(`flow`), which reaches Spark through its `StateEngine` port (`jobs.repartition` is Spark's side)."""

from checkpoint.errors import RepartitionFailed, RepartitionRefused
from checkpoint.repartition.flow import (
    RepartitionOptions,
    StateEngine,
    UndoOptions,
    preflight,
    repartition_checkpoint,
    undo_repartition,
)
from checkpoint.repartition.guards import (
    StateReader,
    head_profile,
    partition_count,
    skew,
    state_readers,
)
from checkpoint.repartition.records import RepartitionResult, StoreDigest, StoreProof, Undone

__all__ = [
    "RepartitionFailed",
    "RepartitionOptions",
    "RepartitionRefused",
    "RepartitionResult",
    "StateEngine",
    "StateReader",
    "StoreDigest",
    "StoreProof",
    "UndoOptions",
    "Undone",
    "head_profile",
    "partition_count",
    "preflight",
    "repartition_checkpoint",
    "skew",
    "state_readers",
    "undo_repartition",
]
