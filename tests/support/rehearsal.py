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


# The user's own code as deployments write it, behind the rehearsal's boundary (jobs.rehearse).
SINK_MARK = "REHEARSAL_SINK_MARK"  # a file the production sink below writes, if it ever runs
RELEASE = "REHEARSAL_RELEASE"  # a file whose appearance ends `hangs`


def raises(spark):
    """A deployment's `main` that fails before it builds the query: its configuration is missing."""
    raise ValueError("no table 'orders' in the deployment's configuration")


def exits(spark):
    """A `main` that gives up as a script does."""
    raise SystemExit(3)


def _production_sink(df, batch_id: int) -> None:
    Path(os.environ[SINK_MARK]).write_text(f"the production sink ran batch {batch_id}")


def _production_writer(spark):
    """The aggregation as the deployment runs it: its own sink, its own checkpoint (the one being
    rehearsed), a processing-time trigger."""
    writer = aggregation(spark).foreachBatch(_production_sink)
    return writer.option("checkpointLocation", os.environ[CHECKPOINT]).trigger(processingTime="1 second")


def starts_and_waits(spark):
    """Spark's examples' `main`: start the query, then wait on it (here for 30 s, not for ever)."""
    query = _production_writer(spark).start()
    query.awaitTermination(30)


def starts_and_swallows(spark):
    """A `main` that logs what `start` raises and returns its writer anyway."""
    writer = _production_writer(spark)
    try:
        writer.start()
    except Exception:  # noqa: BLE001 - what a careless deployment does
        pass
    return writer


def starts(spark):
    """A `main` that returns the running query instead of its writer."""
    return _production_writer(spark).start()


def hangs(spark):
    """A `main` that waits for something that never comes (until the test releases it)."""
    import time

    for _ in range(600):
        if Path(os.environ[RELEASE]).exists():
            break
        time.sleep(0.2)
    return aggregation(spark)


def starts_past_the_writer_and_stops_it(spark):
    """A `main` that starts its query through the JVM's writer, runs it a while and stops it itself,
    then returns a writer: nothing is left running, and the listener of query starts says so."""
    writer = (
        aggregation(spark).format("noop").option("checkpointLocation", os.environ[CHECKPOINT] + "-elsewhere")
    )
    query = writer._jwrite.start()
    query.awaitTermination(3000)
    query.stop()
    return aggregation(spark)


def starts_later_in_a_thread(spark):
    """A `main` that leaves a thread behind which starts the production query once it returns."""
    import threading
    import time

    writer = _production_writer(spark)

    def later() -> None:
        # Once the rehearsal's own query runs (it has returned, and the rehearsal is under way):
        # a fixed sleep raced the rehearsal's end on a fast run and its start on a loaded one.
        deadline = time.monotonic() + 30
        while not spark.streams.active and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            writer.start()
        except BaseException:  # noqa: BLE001 - refused: what the test looks for is that it was
            pass

    threading.Thread(target=later).start()
    return aggregation(spark)


def stops_the_session(spark):
    """A `main` that stops its session before it returns."""
    spark.stop()
    return None
