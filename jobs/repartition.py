"""The Spark side of a repartition (`checkpoint/repartition/flow.py` is the guarded flow): Spark's
own repartitioner rewrites, its state data source reads the state, and its `hash` (the Murmur3 of
HashPartitioning) places the keys; nothing of either is re-implemented here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from checkpoint.format import FORMAT_VERSION_CONF
from checkpoint.repartition import (
    StateReader,
    StoreDigest,
    partition_count,
    skew,
    state_readers,
)
from checkpoint.storage import Storage

from .spark_session import reach, scoped_confs

__all__ = ["SparkStateEngine", "digest_state", "predict", "rows_per_partition", "spark_engine"]


# ------------------------------------------------------------------------------------------------
# Spark: the state data source and Spark's hash


# With row tracking on, every put of a changelog replay reads its key first, to keep a row count
# that these reads never use (they count rows themselves): off while they run, the state data
# source's load costs half (2M keys: 11.1-12.4 s against 6.2-6.5 s, the same digests).
_FAST_READ = {"spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false"}


@contextmanager
def _state(spark, url: str, batch: int, reader: StateReader) -> Iterator[Any]:
    """The store's rows at `batch`, read one Spark partition per state partition, in order: a
    row's `spark_partition_id()` is the state partition it sits in. Act on them inside: the
    reader takes its confs at the load, and its tasks run at the action."""
    with scoped_confs(spark, _FAST_READ):
        load = spark.read.format("statestore").option("batchId", batch)
        for key, value in reader.options.items():
            load = load.option(key, value)
        yield load.load(url)


def _placed(partitions):
    """The partition Spark's HashPartitioning gives a row: Murmur3 (`hash`, seed 42) of the key
    its extractor took, modulo the count."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(F.col("partition_key")), partitions)


def digest_aggregates(*cols) -> list:
    """The aggregates of an order-free digest of rows: xxhash64 and Murmur3 of `cols`, each summed
    exactly (`digest_of` reads them). xxhash64's sum is taken as the sums of its signed high and
    unsigned low 32 bits, as longs: a decimal sum costs a BigDecimal per row (11.4 s against 7.2 s
    over 20M rows of state, 5.7 s of which is reading them). Longs hold these sums up to 2^31 rows;
    past that, Spark's ANSI arithmetic fails the job rather than wrap."""
    from pyspark.sql import functions as F

    x = F.xxhash64(*cols)
    return [F.coalesce(F.sum(F.shiftright(x, 32)), F.lit(0)).alias("digest_hi"),
            F.coalesce(F.sum(x.bitwiseAND(F.lit(0xFFFFFFFF))), F.lit(0)).alias("digest_lo"),
            F.coalesce(F.sum(F.hash(*cols).cast("long")), F.lit(0)).alias("digest_b")]  # fmt: skip


def digest_of(row) -> str:
    """The digest of a row holding `digest_aggregates`: `<xxhash64 sum>:<Murmur3 sum>`."""
    return f"{row['digest_hi'] * 2**32 + row['digest_lo']}:{row['digest_b']}"


def digest_state(
    spark, url: str, batch: int, readers: list[StateReader], partitions: int
) -> list[StoreDigest]:
    """Per store, in one pass: how many rows (over every column family); a digest of their
    multiset (`digest_aggregates` of column family, key bytes and value bytes), so neither order
    nor placement counts and every byte does; and how many rows sit outside the partition Spark's
    hash gives them under `partitions`."""
    from pyspark.sql import functions as F

    out = []
    for reader in readers:
        row_cols = [F.col("column_family_name"), F.col("key_bytes"), F.col("value_bytes")]
        with _state(spark, url, batch, reader) as state:
            row = (
                state.withColumn(
                    "sits_in", F.spark_partition_id()
                )  # projected first: an aggregate takes no such input
                .agg(
                    F.count(F.lit(1)).alias("rows"),
                    *digest_aggregates(*row_cols),
                    F.count(F.when(F.col("sits_in") != _placed(F.lit(partitions)), 1)).alias("misplaced"),
                )
                .first()
            )
        out.append(StoreDigest(reader.operator, reader.store, int(row["rows"]), digest_of(row),
                               int(row["misplaced"])))  # fmt: skip
    return out


def rows_per_partition(
    spark, url: str, batch: int, reader: StateReader, counts: list[int]
) -> dict[int, dict[int, int]]:
    """For each partition count, the rows each partition would hold; under 0, where they sit now.
    One pass over the state: each row hashed once and placed under every count."""
    from pyspark.sql import functions as F

    with _state(spark, url, batch, reader) as state:
        placed = state.select(
            F.hash(F.col("partition_key")).alias("h"),
            F.spark_partition_id().alias("now"),
            F.explode(F.array(*[F.lit(n) for n in [0, *counts]])).alias("n"),
        )
        where = F.when(F.col("n") == 0, F.col("now")).otherwise(F.pmod(F.col("h"), F.col("n")))
        rows = placed.groupBy("n", where.alias("p")).count().collect()
    out: dict[int, dict[int, int]] = {n: dict.fromkeys(range(n), 0) for n in counts}
    out[0] = {}
    for r in rows:
        out[int(r["n"])][int(r["p"])] = int(r["count"])
    return out


class SparkStateEngine:
    """The repartition flow's port (`StateEngine`) on a SparkSession that reaches the checkpoint."""

    def __init__(self, spark: Any, storage: Storage):
        self.spark = spark
        reach(spark, storage)

    def digest(
        self, storage: Storage, batch: int, readers: list[StateReader], partitions: int, format_version: int
    ) -> list[StoreDigest]:
        # Spark's repartitioner refuses a session whose format version is not the checkpoint's, and
        # the state data source reads the HDFS-backed store or format V1 only in a V1 session.
        with scoped_confs(self.spark, {FORMAT_VERSION_CONF: str(format_version)}):
            return digest_state(self.spark, storage.spark_url, batch, readers, partitions)

    def rewrite(self, storage: Storage, partitions: int, format_version: int) -> None:
        with scoped_confs(self.spark, {FORMAT_VERSION_CONF: str(format_version)}):
            self.spark._streamingCheckpointManager.repartition(storage.spark_url, partitions)


def spark_engine(session: Callable[[], Any]) -> Callable[[Storage], SparkStateEngine]:
    """The repartition's port in Spark (`RepartitionOptions.engine`): Spark's repartitioner and
    reader on the checkpoint, on the SparkSession `session` makes once the door's preflight passed."""
    return lambda storage: SparkStateEngine(session(), storage)


def predict(spark, ckpt, candidates: list[int]) -> list[dict[str, Any]]:
    """Per store: the rows (every column family) each partition would hold under each candidate
    count, and a self-check: under the current count every row must be placed where it sits, or
    the keys are not hashed as Spark's repartitioner assumes (a checkpoint from before Spark 3.3
    may not be) and repartitioning it is unsafe."""
    batch = ckpt.latest_committed_batch
    current = partition_count(ckpt, batch)
    reach(spark, ckpt.storage)
    out = []
    for reader in state_readers(ckpt):
        t = time.monotonic()
        with scoped_confs(spark, {FORMAT_VERSION_CONF: str(ckpt.format_version)}):
            counts = rows_per_partition(
                spark, ckpt.storage.spark_url, batch, reader, sorted({current, *candidates})
            )
        now = [counts[0].get(p, 0) for p in range(current)]
        off = [p for p in range(current) if counts[current][p] != now[p]]
        out.append({
            "operator": reader.operator,
            "store": reader.store,
            "rows": sum(now),
            "now": now,
            "candidates": {str(n): {"rows": [counts[n][p] for p in range(n)],
                                    "skew": skew([counts[n][p] for p in range(n)])} for n in candidates},
            "self_check": {"ok": not off, "partitions_off": off},
            "seconds": round(time.monotonic() - t, 3),
        })  # fmt: skip
    return out
