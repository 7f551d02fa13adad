"""The Spark job that rebuilds snapshots: one task per target store, on any master.

The driver plans once from the head-first model and ships each task its store: the checkpoint
narrowed to that store's files (logs, the committed lineage with its header, the base zip and its
SSTs) and the lineage entry to rebuild. A task lists nothing; it reads the chain and base by name
and writes through the checkpoint's storage (fsspec, so S3 needs no Hadoop S3 jars).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoint.compaction import Target
    from checkpoint.lineage import StoreLineage
    from checkpoint.model import Checkpoint

Task = tuple["Checkpoint", "StoreLineage"]


def _rebuild_one(ckpt: Checkpoint, entry: StoreLineage) -> dict[str, Any]:
    from checkpoint.errors import CheckpointError
    from checkpoint.rebuild import rebuild_store

    started = time.monotonic()
    s = entry.store
    try:
        result = rebuild_store(ckpt, entry).as_dict()
        return {
            "ok": True,
            "chain_before": entry.chain_length,
            "task_seconds": time.monotonic() - started,
            **result,
        }
    except CheckpointError as exc:
        where = {"operator": s.operator, "partition": s.partition, "store": s.store}
        return {"ok": False, **where, "error": str(exc)}


def tasks_for(ckpt: Checkpoint, targets: list[Target]) -> list[Task]:
    """What each task needs, planned on the driver: no task loads or lists the checkpoint."""
    return [(ckpt.for_store(t.entry.store), t.entry) for t in targets]


def run_compaction(spark, ckpt: Checkpoint, targets: list[Target]) -> list[dict]:
    """Rebuilds every target of one checkpoint in parallel (see run_compaction_tasks)."""
    return run_compaction_tasks(spark, tasks_for(ckpt, targets))


def run_compaction_tasks(spark, tasks: list[Task]) -> list[dict]:
    """One Spark job for any number of checkpoints: a task per (checkpoint, store) target.

    A failed store is reported, never fatal to the others. Each result carries its checkpoint's URL.
    """
    if not tasks:
        return []
    rdd = spark.sparkContext.parallelize(tasks, len(tasks))
    return rdd.map(lambda t: {"url": t[0].url, **_rebuild_one(*t)}).collect()
