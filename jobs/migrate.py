"""The Spark side of a migration (`checkpoint/migrate/flow.py` is the guarded flow): Spark's state
data source reads every store of the source and of the destination, each in a session of its
own format version, and their rows are compared by count and digest."""

from __future__ import annotations

from collections.abc import Callable
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

    def digest(self, storage: Storage, batch: int, store: StoreId, format_version: int,
               placement: Placement) -> StoreRead:  # fmt: skip
        """Rows, and two 64-bit hashes of each row's key and value summed (neither order nor the
        partition counts, every field does): what the source and the migrated store must share.
        The key and value columns, not the raw bytes: the HDFS-backed store keeps no RocksDB
        encoding byte, and the state data source reads raw bytes of RocksDB only. The partition
        of each row against `HashPartitioning`'s: pmod of Murmur3 (seed 42, SQL's `hash`) of the
        partitioning fields, a struct hashing as its fields in order."""
        from pyspark.sql import functions as F

        with scoped_confs(self.spark, {FORMAT_VERSION: str(format_version)}):
            state = (self.spark.read.format("statestore").option("batchId", batch)
                     .option("operatorId", store.operator).option("storeName", store.store)
                     .load(storage.spark_url))  # fmt: skip
            fields = state.schema["key"].dataType.fieldNames()[: placement.leading]
            placed = F.pmod(F.hash(*(F.col("key").getField(f) for f in fields)), F.lit(placement.partitions))
            row = state.agg(
                F.count(F.lit(1)).alias("rows"),
                F.coalesce(F.sum(F.xxhash64("key", "value").cast("decimal(38,0)")), F.lit(0)).alias("a"),
                F.coalesce(F.sum(F.hash("key", "value").cast("decimal(38,0)")), F.lit(0)).alias("b"),
                F.coalesce(F.sum((placed != F.col("partition_id")).cast("long")), F.lit(0)).alias("away"),
            ).first()
        return StoreRead(int(row["rows"]), f"{row['a']}:{row['b']}", int(row["away"]))


def migrate(session: Callable[[], Any], src: Storage, dest: Storage, audit: AuditTrail, *args: Any,
            **kwargs: Any) -> MigrationResult:  # fmt: skip
    """The guarded migration (`flow.migrate`, whose arguments follow these) with Spark's reader;
    `session` makes the SparkSession, once the preflight passed."""
    return guarded_migrate(lambda: SparkStateDigests(session(), src, dest), src, dest, audit, *args, **kwargs)
