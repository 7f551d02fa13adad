"""Queries as a deployment hands them to `ckpt rehearse --query tests.support.rehearsal:NAME`: each
takes a SparkSession and returns its DataStreamWriter. They read the corpus scenario's input folder
from REHEARSAL_INPUT, as a deployment reads its source from its own configuration."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pyspark.sql import functions as F

from testbed.queries import INPUT_SCHEMA, ListCollector

INPUT = "REHEARSAL_INPUT"
CHECKPOINT = "REHEARSAL_CHECKPOINT"  # for `lease_taken`
QUERIES = __name__


def rehearsed(
    capsys, monkeypatch, checkpoint: Path, inputs: Path, query: str, *more: str
) -> tuple[int, dict]:
    """`ckpt rehearse CHECKPOINT --query tests.support.rehearsal:QUERY --json MORE...` in this
    process, on `inputs`: its exit code and its document."""
    from cli.main import main

    monkeypatch.setenv(INPUT, str(inputs))
    monkeypatch.setenv(CHECKPOINT, str(checkpoint))
    capsys.readouterr()
    code = main(["rehearse", str(checkpoint), "--query", f"{QUERIES}:{query}", "--json", *more])
    return code, json.loads(capsys.readouterr().out)


def _source(spark):
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(os.environ[INPUT])


def _counted(df):
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def _sink_must_not_run(df, batch_id: int) -> None:
    raise AssertionError("the rehearsal ran the query's own sink")


def aggregation(spark):
    """The corpus's aggregation, unchanged, with a sink of its own that fails if it ever runs."""
    return _counted(_source(spark)).writeStream.outputMode("update").foreachBatch(_sink_must_not_run)


def key_type_changed(spark):
    """The grouping key becomes an int."""
    return _counted(_source(spark).withColumn("k", F.hash("k"))).writeStream.outputMode("update")


def filter_changed(spark):
    """A filter constant, not the state's shape: the query restarts, with other state."""
    return _counted(_source(spark).where(F.col("v") != 2)).writeStream.outputMode("update")


def dedup_added(spark):
    """A dropDuplicates before the aggregation: a stateful operator added."""
    return _counted(_source(spark).dropDuplicates(["id"])).writeStream.outputMode("update")


def dedup_removed(spark):
    """The corpus's dedup-then-count without its dropDuplicates: a stateful operator removed."""
    return _source(spark).groupBy("k").agg(F.count("*").alias("n")).writeStream.outputMode("update")


def join(spark):
    """The corpus's stream-stream join, its two inputs under REHEARSAL_INPUT."""
    from testbed.queries import stream_join

    paths = {side: os.path.join(os.environ[INPUT], side) for side in ("left", "right")}
    return stream_join(spark, paths, 1).writeStream.outputMode("append")


def _list_state(spark, mode: str):
    rows = (
        _source(spark)
        .groupBy("k")
        .transformWithStateInPandas(
            ListCollector(), outputStructType="k string, n long", outputMode=mode, timeMode="None"
        )
    )
    return rows.writeStream.outputMode(mode.lower())


def list_state(spark):
    return _list_state(spark, "Update")


def list_state_append(spark):
    """transformWithState in another output mode than the checkpoint records."""
    return _list_state(spark, "Append")


def lease_taken(spark):
    """The aggregation, built while this function holds the checkpoint's maintenance lease: the
    rehearsal holds it only while it copies, so it is free when Spark runs."""
    from checkpoint.safety import lease_for
    from checkpoint.storage import Storage

    with lease_for(Storage(os.environ[CHECKPOINT]), "a test, during the rehearsal").acquire():
        return aggregation(spark)


def dedup_aggregation(spark):
    """The corpus's dropDuplicates then count, unchanged."""
    from testbed.queries import dedup_then_aggregation

    return dedup_then_aggregation(spark, {"": os.environ[INPUT]}).writeStream.outputMode("update")
