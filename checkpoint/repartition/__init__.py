"""Changing a stopped query's state partition count: the guards around Spark's repartitioner
(`guards`); the Spark side is `jobs.repartition`."""

from checkpoint.errors import RepartitionFailed, RepartitionRefused
from checkpoint.repartition.guards import head_profile, preflight

__all__ = ["RepartitionFailed", "RepartitionRefused", "head_profile", "preflight"]
