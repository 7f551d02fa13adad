"""The Spark job that rebuilds snapshots: one task per target store, on any master.

The driver plans once from the head-first model and ships each task its store: the checkpoint
narrowed to that store's files (logs, the committed lineage with its header, the base zip and its
SSTs) and the lineage entry to rebuild. A task lists nothing; it reads the chain and base by name
and writes through the checkpoint's storage (fsspec, so S3 needs no Hadoop S3 jars).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoint.compaction import Target
    from checkpoint.lineage import StoreLineage
    from checkpoint.model import Checkpoint, StoreId
    from checkpoint.rebuild import RebuildResult

Task = tuple["Checkpoint", "StoreLineage"]


@dataclass(frozen=True)
class StoreOutcome:
    """What one task did: `rebuilt` when it published a snapshot, else `error` says why not."""

    url: str
    store: StoreId
    chain_before: int
    task_seconds: float
    rebuilt: RebuildResult | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.rebuilt is not None

    def as_dict(self) -> dict[str, Any]:
        where = {
            "operator": self.store.operator,
            "partition": self.store.partition,
            "store": self.store.store,
        }
        done = self.rebuilt.as_dict() if self.rebuilt else {"error": self.error}
        return {"url": self.url, "ok": self.ok, "chain_before": self.chain_before,
                "task_seconds": round(self.task_seconds, 3), **where, **done}  # fmt: skip


def _rebuild_one(ckpt: Checkpoint, entry: StoreLineage) -> StoreOutcome:
    from checkpoint.errors import CheckpointError
    from checkpoint.rebuild import rebuild_store

    started = time.monotonic()
    done = {"url": ckpt.url, "store": entry.store, "chain_before": entry.chain_length}
    try:
        rebuilt = rebuild_store(ckpt, entry)
    except CheckpointError as exc:
        return StoreOutcome(**done, task_seconds=time.monotonic() - started, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a RocksDB or I/O failure fails this store, never the job
        where = traceback.extract_tb(exc.__traceback__)[-1]
        error = f"{type(exc).__name__}: {exc} (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        return StoreOutcome(**done, task_seconds=time.monotonic() - started, error=error)
    return StoreOutcome(**done, task_seconds=time.monotonic() - started, rebuilt=rebuilt)


def tasks_for(ckpt: Checkpoint, targets: list[Target]) -> list[Task]:
    """What each task needs, planned on the driver: no task loads or lists the checkpoint."""
    return [(ckpt.for_store(t.entry.store), t.entry) for t in targets]


def run_compaction(spark, ckpt: Checkpoint, targets: list[Target]) -> list[StoreOutcome]:
    """Rebuilds every target of one checkpoint in parallel (see run_compaction_tasks)."""
    return run_compaction_tasks(spark, tasks_for(ckpt, targets))


def run_compaction_tasks(spark, tasks: list[Task]) -> list[StoreOutcome]:
    """One Spark job for any number of checkpoints: a task per (checkpoint, store) target.

    A failed store is reported in its outcome, whatever failed, and never stops the others.
    """
    if not tasks:
        return []
    return spark.sparkContext.parallelize(tasks, len(tasks)).map(lambda t: _rebuild_one(*t)).collect()
