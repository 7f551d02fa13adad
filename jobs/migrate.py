"""The Spark side of a migration (`checkpoint/migrate/flow.py` is the guarded flow): each store
written in a Spark task of its own, and Spark's state data source reading every store of the
source and of the destination, each in a session of its own format version, their rows compared
by count and digest."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from functools import reduce
from typing import Any

from checkpoint.errors import CheckpointError
from checkpoint.format import FORMAT_VERSION_CONF, RAW_FAMILIES
from checkpoint.migrate import (
    MigrationPorts,
    Placement,
    ReadSide,
    StoreJob,
    StoreRead,
    StoreWritten,
    store_failed,
)
from checkpoint.model import StoreId
from checkpoint.storage import Storage

from .per_store import NotDone, PerStore, each_store
from .repartition import digest_aggregates, digest_of
from .spark_session import (
    failure_line,
    reach,
    scoped_confs,
    task_crash_point,
)


def _write_in_task(job: StoreJob) -> StoreWritten | str:
    """In a Spark task: what the store's job wrote, or why it failed (an exception would come back
    to the driver inside the JVM's stack trace)."""
    task_crash_point("migrate.task", job.entry.store)
    try:
        return job.run()
    except Exception as exc:  # noqa: BLE001 - a RocksDB or I/O failure fails the migration, said in one line
        return failure_line(exc)


class SparkStoreWriter:
    """`checkpoint.migrate.flow.StoreWriter` in Spark: a job of one task per store
    (`jobs.per_store`), as compaction runs its rebuilds, stopping at the first failure. A store's
    RocksDB and its chain's decoding are its task's, so the driver's memory does not follow the
    state's size, and the stores of a query's partitions are written side by side."""

    def __init__(self, spark: Any, *storages: Storage):
        self.spark = spark
        for storage in storages:  # refused here, before the destination holds anything, if unreachable
            reach(spark, storage)

    def __call__(self, jobs: list[StoreJob], check: Callable[[], None]) -> Iterator[StoreWritten]:
        how: PerStore[StoreJob, StoreWritten] = PerStore(
            in_task=_write_in_task, here=lambda job: job.run(), ship=lambda job: job.to_ship(),
            describe=lambda job: f"migrate {job.target.storage.url} {job.entry.store}",
            instead=f"the {len(jobs)} stores are written in this process, one after another",
        )  # fmt: skip
        failed: tuple[StoreJob, NotDone] | None = None
        for job, out in each_store(self.spark, jobs, how, check=lambda _: check(), stop_on_failure=True):
            if isinstance(out, NotDone):
                failed = failed or (job, out)
            else:
                yield out
        if failed is not None:
            job, why = failed
            if why.error is not None and not (why.started and isinstance(why.error, CheckpointError)):
                raise why.error  # the lease's, or a bug's: as raised
            raise store_failed(job, why.reason)


class SparkStateDigests:
    """`checkpoint.migrate.flow.StateDigests` on a SparkSession that reaches both checkpoints."""

    def __init__(self, spark: Any, *storages: Storage):
        self.spark = spark
        for storage in storages:
            reach(spark, storage)

    def compare(self, src: ReadSide, dest: ReadSide, batch: int, store: StoreId,
                placement: Placement) -> tuple[StoreRead, StoreRead]:  # fmt: skip
        """SRC's store and DEST's, each read in a session of its own format version, in one Spark
        job: each side is resolved (`load`) under its own format version, which the state data source
        takes then (a side read under the other's fails: it finds no files or no ids), and
        their union runs a side a core."""
        src_read, dest_read = self.summarize([src, dest], batch, store, placement)
        return src_read, dest_read

    def summarize(self, sides: list[ReadSide], batch: int, store: StoreId,
                  placement: Placement) -> list[StoreRead]:  # fmt: skip
        """Per side (a checkpoint and the format version its session reads it in): rows, and the digest
        (`digest_aggregates`) of each row's key and value (neither order nor the partition counts,
        every field does): what the source and the migrated store must share. The key and value
        columns, not the raw bytes: the HDFS-backed store keeps no RocksDB encoding byte, and the state
        data source reads raw bytes of RocksDB only. A store of column families (transformWithState,
        RocksDB on both sides) is read raw instead: every family's key and value bytes. The
        partition of each row against `HashPartitioning`'s: pmod of Murmur3 (seed 42, SQL's
        `hash`) of the partitioning fields, a struct hashing as its fields in order."""
        from pyspark.sql import functions as F

        frames = []
        for side, (storage, format_version) in enumerate(sides):
            with scoped_confs(self.spark, {FORMAT_VERSION_CONF: str(format_version)}):
                read = (self.spark.read.format("statestore").option("batchId", batch)
                        .option("operatorId", store.operator).option("storeName", store.store))  # fmt: skip
                if placement.families:  # raw rows name no partition: the store's is the task's
                    frame = (read.options(**RAW_FAMILIES).load(storage.spark_url)
                             .withColumn("partition_id", F.spark_partition_id()))  # fmt: skip
                else:
                    frame = read.load(storage.spark_url)
                frames.append(frame.withColumn("side", F.lit(side)))
        state = reduce(lambda a, b: a.unionByName(b), frames)
        row: tuple[str, ...]
        if placement.families:  # raw rows: every family's key and value bytes
            row = ("column_family_name", "key_bytes", "value_bytes")
            placed = F.pmod(F.hash(F.col("partition_key")), F.lit(placement.partitions))
        else:
            row = ("key", "value")
            fields = state.schema["key"].dataType.fieldNames()[: placement.leading]
            placed = F.pmod(F.hash(*(F.col("key").getField(f) for f in fields)), F.lit(placement.partitions))
        found = {r["side"]: r for r in state.groupBy("side").agg(
            F.count(F.lit(1)).alias("rows"),
            *digest_aggregates(*row),
            F.sum((placed != F.col("partition_id")).cast("long")).alias("away"),
        ).collect()}  # fmt: skip
        return [StoreRead(int(r["rows"]), digest_of(r), int(r["away"])) if (r := found.get(side))
                else StoreRead(0, "0:0", 0) for side in range(len(sides))]  # fmt: skip


def spark_ports(session: Callable[[], Any]) -> MigrationPorts:
    """The migration's ports in Spark (`MigrationOptions.ports`): its tasks write the state, its
    reader proves it. `session` makes the SparkSession, once the door's preflight passed and a
    port is first asked for."""
    spark = functools.cache(session)
    return MigrationPorts(
        digests=lambda src, dest: SparkStateDigests(spark(), src, dest),
        writer=lambda src, dest: SparkStoreWriter(spark(), src, dest),
    )
