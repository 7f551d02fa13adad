"""Changing a stopped query's state partition count: the guards around Spark's repartitioner
(`guards`); the Spark side is `jobs.repartition`."""

from checkpoint.repartition.guards import RepartitionFailed, RepartitionRefused, head_profile, preflight

__all__ = ["RepartitionFailed", "RepartitionRefused", "head_profile", "preflight"]
