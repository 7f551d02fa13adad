"""Changing a stopped query's state partition count: the guards around Spark's repartitioner
(`guards`), the typed records it leaves in the audit trail (`records`) and the guarded flow
(`flow`), which reaches Spark through its `StateEngine` port (`jobs.repartition` is Spark's side)."""

from checkpoint.errors import RepartitionFailed, RepartitionRefused
from checkpoint.repartition.flow import StateEngine, repartition, undo_repartition
from checkpoint.repartition.guards import head_profile, preflight
from checkpoint.repartition.records import RepartitionResult, StoreDigest, StoreProof, Undone

__all__ = [
    "RepartitionFailed", "RepartitionRefused", "RepartitionResult", "StateEngine", "StoreDigest",
    "StoreProof", "Undone", "head_profile", "preflight", "repartition", "undo_repartition",
]  # fmt: skip
