"""The Spark side of compaction: RocksDB zips rebuilt in Spark tasks, one job of one task per
target store, on any master; the HDFS-backed store's snapshots written by Spark's own provider.

The driver plans once from the head-first model and ships each task its store: the checkpoint
narrowed to that store's files (logs, the committed lineage with its header, the base zip and its
SSTs) and the lineage entry to rebuild. A task lists nothing; it reads the chain and base by name
and writes through the checkpoint's storage (fsspec, so S3 needs no Hadoop S3 jars). A job per
store (several at once) is what keeps a task that dies from failing any store but its own.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoint.errors import RebuildError
from checkpoint.format import FORMAT_VERSION_CONF, ByEngine
from checkpoint.progress import Progress, report

from .per_store import PerStore, Where, each_store
from .spark_session import failure_line, task_crash_point

if TYPE_CHECKING:
    from checkpoint.compaction import RebuildResult, Task
    from checkpoint.model import Checkpoint, StoreId

log = logging.getLogger(__name__)


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


def _outcome(task: Task, work: Callable[[], RebuildResult]) -> StoreOutcome:
    started = time.monotonic()
    try:
        rebuilt = work()
    except Exception as exc:  # noqa: BLE001 - a RocksDB, JVM or I/O failure fails this store, never the job
        return StoreOutcome.of(task, time.monotonic() - started, error=failure_line(exc))
    return StoreOutcome.of(task, time.monotonic() - started, rebuilt=rebuilt)


def _rebuild_one(task: Task) -> StoreOutcome:
    from checkpoint.compaction import rebuild_store

    ckpt, entry = task
    task_crash_point("compaction.task", entry.store)
    return _outcome(task, lambda: rebuild_store(ckpt, entry))


def _rebuilt_here(task: Task, engine: SparkSnapshotEngine) -> StoreOutcome:
    return _rebuild_one(task)  # RocksDB's rebuild needs no Spark


def _provider_snapshot(task: Task, engine: SparkSnapshotEngine) -> StoreOutcome:
    from checkpoint.compaction import materialize_snapshot

    ckpt, entry = task
    return _outcome(task, lambda: materialize_snapshot(ckpt, entry, engine))


# A store compacted in this process: the HDFS-backed store's snapshot by Spark's provider in the
# driver's JVM, a RocksDB store rebuilt here. Where each runs when Spark's tasks can: the
# provider's in the driver, a rebuild in a task.
_HERE = ByEngine(hdfs=_provider_snapshot, rocksdb=_rebuilt_here)
_RUNS = ByEngine(hdfs=Where.DRIVER, rocksdb=Where.TASK)


def run_compaction_tasks(spark, tasks: list[Task], check: Callable[[Checkpoint], None]) -> list[StoreOutcome]:
    """One Spark job per store (`jobs.per_store`), for any number of checkpoints. A failed store is
    reported in its outcome, whatever failed, and never stops the others. `check(checkpoint)` (its
    lease's) runs on the driver before each store's job, whose task publishes: once it raises, no
    further store is started and each is reported with its reason. Each HDFS-backed store's
    snapshot is written by Spark's provider in the driver's JVM; under Spark Connect, which has
    none on this side, it is told so, and RocksDB stores are rebuilt in this process."""
    engine = SparkSnapshotEngine(spark)

    def here(task: Task) -> StoreOutcome:
        return task[0].states.engine.of(_HERE)(task, engine)

    def describe(task: Task) -> str:
        s = task[1].store
        return f"compact {task[0].url} op {s.operator} part {s.partition} {s.store}"

    how = PerStore(
        in_task=_rebuild_one, here=here, describe=describe,
        runs=lambda task: task[0].states.engine.of(_RUNS),
        instead="RocksDB stores are rebuilt in this process, one after another",
    )  # fmt: skip
    outcomes = []
    done = each_store(spark, tasks, how, check=lambda t: check(t[0]), stop_on_failure=False)
    for task, out in done:
        outcome = (
            out if isinstance(out, StoreOutcome) else StoreOutcome.of(task, out.seconds, error=out.reason)
        )
        outcomes.append(outcome)
        progress = Progress("stores compacted", len(outcomes), len(tasks))
        report(log, progress, "%d of %d stores compacted (%s)", progress.done, progress.total,
               "ok" if outcome.ok else "failed")  # fmt: skip
    return outcomes


# Over the private copy of one store's chain (checkpoint.compaction.hdfs): the checkpoint's pinned
# confs as a restart applies them, and these on top.
_SNAPSHOT_CONFS = {
    FORMAT_VERSION_CONF: "1",  # the provider refuses any other
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "0",  # the planner decided already
    "spark.sql.streaming.maxBatchesToRetainInMemory": "1",  # maintenance snapshots a loaded map only
    # Maintenance also deletes files below what it retains: nothing, even in the copy.
    "spark.sql.streaming.minBatchesToRetain": str(2**31 - 1),
    # The provider is given no schemas: rows go from the chain to the snapshot as Spark's bytes,
    # and are checked against their schema by Spark's own reader at the restart.
    "spark.sql.streaming.stateStore.formatValidation.enabled": "false",
}
_STATE = "org.apache.spark.sql.execution.streaming.state"


class SparkSnapshotEngine:
    """`checkpoint.compaction.hdfs.SnapshotEngine` by Spark's HDFSBackedStateStoreProvider in the
    driver's JVM."""

    def __init__(self, spark: Any):
        self.spark = spark

    def snapshot(self, state_root: str, store: StoreId, version: int, conf: Mapping[str, str]) -> int:
        provider = self._provider(state_root, store, conf)
        try:
            rows = self._load(provider, store, version)
            provider.doMaintenance()  # writes <version>.snapshot: it is the newest version there
            return rows
        finally:
            provider.close()

    def load(self, state_root: str, store: StoreId, version: int, conf: Mapping[str, str]) -> int:
        provider = self._provider(state_root, store, conf)
        try:
            return self._load(provider, store, version)
        finally:
            provider.close()

    def free_heap(self) -> int | None:
        jvm = getattr(self.spark, "_jvm", None)
        if jvm is None:
            return None
        runtime = jvm.java.lang.Runtime.getRuntime()
        return int(runtime.maxMemory()) - (int(runtime.totalMemory()) - int(runtime.freeMemory()))

    def _provider(self, state_root: str, store: StoreId, conf: Mapping[str, str]) -> Any:
        jvm, session = getattr(self.spark, "_jvm", None), getattr(self.spark, "_jsparkSession", None)
        if jvm is None or session is None:
            raise RebuildError(f"{store}: the HDFS-backed store's snapshot is written by Spark's provider "
                               "in the driver's JVM, which a Spark Connect session does not give: "
                               "compact it with a master (local[*], spark://, yarn)")  # fmt: skip
        sql_conf = session.sessionState().conf().clone()
        for key, value in {**conf, **_SNAPSHOT_CONFS}.items():
            sql_conf.setConfString(key, value)
        hadoop = session.sessionState().newHadoopConf()
        hadoop.set("sql.streaming.runId", str(uuid.uuid4()))  # the provider's id; no query runs
        state = jvm
        for part in _STATE.split("."):
            state = getattr(state, part)
        no_schema = jvm.org.apache.spark.sql.types.StructType()
        sid = state.StateStoreId(Path(state_root).as_uri(), store.operator, store.partition, store.store)
        store_conf, spec = state.StateStoreConf.apply(sql_conf), state.NoPrefixKeyStateEncoderSpec(no_schema)
        provider = state.HDFSBackedStateStoreProvider()
        none = jvm.scala.Option.empty()
        provider.init(sid, no_schema, no_schema, spec, False, store_conf, hadoop, False, none)
        return provider

    def _load(self, provider: Any, store: StoreId, version: int) -> int:
        """Loads `version` as recovery does (the newest snapshot at or below it, then the deltas);
        the rows of the map the provider now holds."""
        provider.getReadStore(version, self.spark._jvm.scala.Option.empty())
        maps = provider.getLoadedMaps()  # newest version first
        if maps.isEmpty() or maps.firstKey() != version:
            raise RebuildError(f"{store}: Spark's provider did not load version {version}")
        return int(maps.firstEntry().getValue().size())
