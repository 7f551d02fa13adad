"""The Spark side of a migration (`checkpoint/migrate/flow.py` is the guarded flow): Spark's state
data source reads every store of the source and of the destination, each in a session of its
own format version, and their rows are compared by count and digest."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

from checkpoint.cleanup.audit import AuditTrail
from checkpoint.migrate.flow import MigrationResult, Placement, StoreRead
from checkpoint.migrate.flow import migrate as guarded_migrate
from checkpoint.model.checkpoint import StoreId
from checkpoint.storage import Storage

from .repartition import FORMAT_VERSION
from .spark_session import reach, scoped_confs


class SparkStateDigests:
    """`checkpoint.migrate.flow.StateDigests` on a SparkSession that reaches both checkpoints."""

    def __init__(self, spark: Any, *storages: Storage):
        self.spark = spark
        for storage in storages:
            reach(spark, storage)

    def compare(self, src: Storage, dest: Storage, batch: int, store: StoreId,
                placement: Placement) -> tuple[StoreRead, StoreRead]:  # fmt: skip
        """SRC's store read in a format-V1 session and DEST's in a V2 one, in one Spark job: each
        side is resolved (`load`) under its own format version, which the state data source
        takes then (a side read under the other's fails: it finds no files or no ids), and
        their union runs a side a core."""
        src_read, dest_read = self._summarize([(src, 1), (dest, 2)], batch, store, placement)
        return src_read, dest_read

    def digest(self, storage: Storage, batch: int, store: StoreId, format_version: int,
               placement: Placement) -> StoreRead:  # fmt: skip
        """One checkpoint's store, read in a session of `format_version`."""
        return self._summarize([(storage, format_version)], batch, store, placement)[0]

    def _summarize(self, sides: list[tuple[Storage, int]], batch: int, store: StoreId,
                   placement: Placement) -> list[StoreRead]:  # fmt: skip
        """Per side: rows, and two 64-bit hashes of each row's key and value summed (neither order
        nor the partition counts, every field does): what the source and the migrated store must
        share. The key and value columns, not the raw bytes: the HDFS-backed store keeps no
        RocksDB encoding byte, and the state data source reads raw bytes of RocksDB only. The
        partition of each row against `HashPartitioning`'s: pmod of Murmur3 (seed 42, SQL's
        `hash`) of the partitioning fields, a struct hashing as its fields in order."""
        from pyspark.sql import functions as F

        frames = []
        for side, (storage, format_version) in enumerate(sides):
            with scoped_confs(self.spark, {FORMAT_VERSION: str(format_version)}):
                frames.append(self.spark.read.format("statestore").option("batchId", batch)
                              .option("operatorId", store.operator).option("storeName", store.store)
                              .load(storage.spark_url).withColumn("side", F.lit(side)))  # fmt: skip
        state = reduce(lambda a, b: a.unionByName(b), frames)
        fields = state.schema["key"].dataType.fieldNames()[: placement.leading]
        placed = F.pmod(F.hash(*(F.col("key").getField(f) for f in fields)), F.lit(placement.partitions))
        found = {r["side"]: r for r in state.groupBy("side").agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.xxhash64("key", "value").cast("decimal(38,0)")).alias("a"),
            F.sum(F.hash("key", "value").cast("decimal(38,0)")).alias("b"),
            F.sum((placed != F.col("partition_id")).cast("long")).alias("away"),
        ).collect()}  # fmt: skip
        return [StoreRead(int(r["rows"]), f"{r['a']}:{r['b']}", int(r["away"])) if (r := found.get(side))
                else StoreRead(0, "0:0", 0) for side in range(len(sides))]  # fmt: skip


def migrate(session: Callable[[], Any], src: Storage, dest: Storage, audit: AuditTrail, *args: Any,
            **kwargs: Any) -> MigrationResult:  # fmt: skip
    """The guarded migration (`flow.migrate`, whose arguments follow these) with Spark's reader;
    `session` makes the SparkSession, once the preflight passed."""
    return guarded_migrate(lambda: SparkStateDigests(session(), src, dest), src, dest, audit, *args, **kwargs)
