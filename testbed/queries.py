"""The corpus's queries and their inputs: deterministic JSON files, one a micro-batch, read by
real PySpark streaming queries (aggregations, a dedup, a join, transformWithState), and the run of a
query over every available file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from checkpoint.format import FORMAT_VERSION_CONF

# --------------------------------------------------------------------------------------------
# Deterministic inputs


def _keyed_rows(batch: int, rows: int = 12, keys: int = 9, salt: int = 0) -> list[dict]:
    """Rows of one input file: keys repeat across batches so the state both grows and updates."""
    out = []
    for j in range(rows):
        n = batch * rows + j
        out.append({"k": f"k{(n * 7 + salt) % keys:02d}", "v": n % 5, "id": n})
    return out


def _dedup_rows(batch: int) -> list[dict]:
    # Every id appears twice across neighbouring batches: dropDuplicates drops the repeat.
    return [
        {"k": f"k{(i * 3) % 7:02d}", "v": i % 4, "id": i}
        for i in list(range(batch * 6, batch * 6 + 6)) + list(range(max(0, batch - 1) * 6, batch * 6))
    ]


def write_inputs(folder: Path, batches: int, rows_for: Callable[[int], list[dict]], start: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for b in range(start, start + batches):
        with open(folder / f"part-{b:05d}.json", "w") as f:
            for row in rows_for(b):
                f.write(json.dumps(row, sort_keys=True) + "\n")


INPUT_SCHEMA = "k string, v long, id long"


def _stream(spark, path: str, max_files: int):
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", max_files).json(path)


# --------------------------------------------------------------------------------------------
# Queries


def aggregation(spark, paths: dict[str, str], max_files: int = 1):
    from pyspark.sql import functions as F

    return (
        _stream(spark, paths[""], max_files)
        .groupBy("k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    )


def windowed_aggregation(spark, paths: dict[str, str], max_files: int = 1):
    """Event time = id seconds; the watermark passes closed windows, whose state is deleted."""
    from pyspark.sql import functions as F

    events = (
        _stream(spark, paths[""], max_files)
        .withColumn("ts", F.timestamp_seconds("id"))
        .withWatermark("ts", "5 seconds")
    )
    return events.groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))


def dedup_then_aggregation(spark, paths: dict[str, str], max_files: int = 1):
    from pyspark.sql import functions as F

    return (
        _stream(spark, paths[""], max_files).dropDuplicates(["id"]).groupBy("k").agg(F.count("*").alias("n"))
    )


def stream_join(spark, paths: dict[str, str], max_files: int = 1):
    left = _stream(spark, paths["left"], max_files).selectExpr("k", "v as lv", "id as lid")
    right = _stream(spark, paths["right"], max_files).selectExpr("k as rk", "v as rv", "id as rid")
    return left.join(right, left.k == right.rk, "inner")


def list_state(spark, paths: dict[str, str], max_files: int = 1):
    return (
        _stream(spark, paths[""], max_files)
        .groupBy("k")
        .transformWithStateInPandas(
            statefulProcessor=ListCollector(),
            outputStructType="k string, n long",
            outputMode="Update",
            timeMode="None",
        )
    )


try:  # TWS needs pandas and pyarrow on the driver; the import is cheap when they are there.
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor as _StatefulProcessor
except ImportError:  # pragma: no cover - pyspark is a hard dependency of jobs/
    _StatefulProcessor = object


class ListCollector(_StatefulProcessor):
    """transformWithStateInPandas with a ListState: appends become MERGE records in changelog v4."""

    def init(self, handle) -> None:
        from pyspark.sql.types import LongType, StructField, StructType

        self.items = handle.getListState("items", StructType([StructField("v", LongType())]))

    def handleInputRows(self, key, rows, timerValues) -> Iterator:
        import pandas as pd

        for pdf in rows:
            self.items.appendList([(int(v),) for v in pdf["v"]])
        count = sum(1 for _ in self.items.get())
        yield pd.DataFrame({"k": [key[0]], "n": [count]})

    def close(self) -> None:
        pass


def _run(df, checkpoint: Path, output_mode: str = "update", foreach_batch=None) -> None:
    """Run every available input file, one micro-batch each; a failing query fails generation."""
    writer = df.writeStream.outputMode(output_mode).option("checkpointLocation", str(checkpoint))
    writer = writer.foreachBatch(foreach_batch) if foreach_batch else writer.format("noop")
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:  # pragma: no cover - awaitTermination raises first
        raise RuntimeError(f"query on {checkpoint} failed: {query.exception()}")


NO_SNAPSHOTS = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "100000"}
FREQUENT_SNAPSHOTS = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}
FORMAT_V1 = {FORMAT_VERSION_CONF: "1"}


def _join_right_rows(batch: int) -> list[dict]:
    return _keyed_rows(batch, rows=8, salt=3)
