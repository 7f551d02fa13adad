"""The Spark jobs that rebuild snapshots: one job of one task per target store, on any master.

The driver plans once from the head-first model and ships each task its store: the checkpoint
narrowed to that store's files (logs, the committed lineage with its header, the base zip and its
SSTs) and the lineage entry to rebuild. A task lists nothing; it reads the chain and base by name
and writes through the checkpoint's storage (fsspec, so S3 needs no Hadoop S3 jars). A job per
store (several at once) is what keeps a task that dies from failing any store but its own.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checkpoint import crash
from checkpoint.crash import crash_point
from checkpoint.progress import Progress, report

if TYPE_CHECKING:
    from checkpoint.compaction.rebuild import RebuildResult
    from checkpoint.compaction.targets import Target
    from checkpoint.model.checkpoint import Checkpoint, StoreId
    from checkpoint.model.lineage import StoreLineage

log = logging.getLogger(__name__)
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

    @classmethod
    def of(cls, task: Task, seconds: float, rebuilt: RebuildResult | None = None, error: str | None = None):
        ckpt, entry = task
        return cls(ckpt.url, entry.store, entry.chain_length, seconds, rebuilt, error)

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


# The crash tests' spec (checkpoint.crash), read on the driver and handed to each task as a Spark
# local property: a Python worker does not see the driver's environment as it is now.
_CRASH_PROPERTY = "ckpt.crash_at"


def _rebuild_one(ckpt: Checkpoint, entry: StoreLineage) -> StoreOutcome:
    from checkpoint.compaction.rebuild import rebuild_store
    from checkpoint.errors import CheckpointError

    started, task = time.monotonic(), (ckpt, entry)
    _maybe_die(entry.store)
    try:
        rebuilt = rebuild_store(ckpt, entry)
    except CheckpointError as exc:
        return StoreOutcome.of(task, time.monotonic() - started, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a RocksDB or I/O failure fails this store, never the job
        where = traceback.extract_tb(exc.__traceback__)[-1]
        error = f"{type(exc).__name__}: {exc} (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        return StoreOutcome.of(task, time.monotonic() - started, error=error)
    return StoreOutcome.of(task, time.monotonic() - started, rebuilt=rebuilt)


def _maybe_die(store: StoreId) -> None:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None:
        crash_point("compaction.task", store.label, context.getLocalProperty(_CRASH_PROPERTY) or "")


def tasks_for(ckpt: Checkpoint, targets: list[Target]) -> list[Task]:
    """What each task needs, planned on the driver: no task loads or lists the checkpoint."""
    return [(ckpt.for_store(t.entry.store), t.entry) for t in targets]


def run_compaction(
    spark, ckpt: Checkpoint, targets: list[Target], check: Callable[[Checkpoint], None] | None = None
) -> list[StoreOutcome]:
    """Rebuilds every target of one checkpoint in parallel (see run_compaction_tasks)."""
    return run_compaction_tasks(spark, tasks_for(ckpt, targets), check)


def run_compaction_tasks(
    spark, tasks: list[Task], check: Callable[[Checkpoint], None] | None = None
) -> list[StoreOutcome]:
    """One Spark job per store, as many at once as the cluster has cores, for any number of
    checkpoints. A failed store is reported in its outcome, whatever failed, and never stops the
    others: an exception in the rebuild, and a task that died (its Python worker killed by the OOM
    killer, a segfault in RocksDB), which fails only that store's job. `check(checkpoint)` (its
    lease's) runs on the driver before each store's job, whose task publishes: once it raises, no
    further store is started and each is reported with its reason."""
    if not tasks:
        return []
    sc = spark.sparkContext
    crash_at = crash.spec()
    stop: list[str] = []

    def one(task: Task) -> StoreOutcome:
        ckpt, entry = task
        try:
            if stop:
                return StoreOutcome.of(task, 0.0, error=f"not started: {stop[0]}")
            if check is not None:
                check(ckpt)
        except Exception as exc:  # noqa: BLE001 - LeaseLost: nothing more may be published
            stop.append(str(exc))
            return StoreOutcome.of(task, 0.0, error=f"not started: {exc}")
        s = entry.store
        sc.setJobDescription(f"compact {ckpt.url} op {s.operator} part {s.partition} {s.store}")
        sc.setLocalProperty(_CRASH_PROPERTY, crash_at)
        started = time.monotonic()
        try:
            return sc.parallelize([task], 1).map(lambda t: _rebuild_one(*t)).collect()[0]
        except Exception as exc:  # noqa: BLE001 - the task itself died: this store's job failed alone
            why = _first_line(exc)
            return StoreOutcome.of(task, time.monotonic() - started, error=f"the Spark task died: {why}")

    workers = max(1, min(len(tasks), sc.defaultParallelism))
    outcomes = []
    with ThreadPoolExecutor(workers) as pool:
        for outcome in pool.map(one, tasks):
            outcomes.append(outcome)
            done = Progress("stores compacted", len(outcomes), len(tasks))
            report(log, done, "%d of %d stores compacted (%s)", done.done, done.total,
                   "ok" if outcome.ok else "failed")  # fmt: skip
    return outcomes


def _first_line(exc: Exception) -> str:
    """What a failed Spark job says, without the JVM's stack trace."""
    text = str(exc)
    for line in text.splitlines():
        if "Exception" in line or "Error" in line or "exited" in line.lower():
            return line.strip()[:300]
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
