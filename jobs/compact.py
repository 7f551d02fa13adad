"""The Spark job that rebuilds snapshots: one task per target store, on any master.

Each task reads and writes through fsspec (so S3 needs no Hadoop S3 jars), loads the checkpoint
itself, and returns its result as a plain dict; the driver only plans and collects.
"""

from __future__ import annotations

import time
from typing import Any


def _rebuild_one(url: str, storage_options: dict[str, Any], key: tuple[int, int, str, int]) -> dict[str, Any]:
    from checkpoint.errors import CheckpointError
    from checkpoint.lineage import store_lineage
    from checkpoint.model import StoreId, load_checkpoint
    from checkpoint.rebuild import rebuild_store

    operator, partition, store, batch = key
    started = time.monotonic()
    try:
        ckpt = load_checkpoint(url, storage_options)
        entry = store_lineage(ckpt, StoreId(operator, partition, store), batch)
        result = rebuild_store(ckpt, entry).as_dict()
        return {
            "ok": True,
            "chain_before": entry.chain_length,
            "task_seconds": time.monotonic() - started,
            **result,
        }
    except CheckpointError as exc:
        return {"ok": False, "operator": operator, "partition": partition, "store": store, "error": str(exc)}


def run_compaction(
    spark, url: str, keys: list[tuple[int, int, str, int]], storage_options=None
) -> list[dict]:
    """Rebuilds every target of one checkpoint in parallel (see run_compaction_tasks)."""
    return run_compaction_tasks(spark, [(url, storage_options or {}, key) for key in keys])


def run_compaction_tasks(
    spark, tasks: list[tuple[str, dict[str, Any], tuple[int, int, str, int]]]
) -> list[dict]:
    """One Spark job for any number of checkpoints: a task per (checkpoint, store) target.

    A failed store is reported, never fatal to the others. Each result carries its checkpoint's URL.
    """
    if not tasks:
        return []
    rdd = spark.sparkContext.parallelize(tasks, len(tasks))
    return rdd.map(lambda t: {"url": t[0], **_rebuild_one(*t)}).collect()
