"""Reading a checkpoint's state through Spark's state data source, for before/after comparisons."""

from __future__ import annotations

from pathlib import Path

from testbed.restart import USER_READERS

# The reader options that cover every store of a corpus scenario.
READERS = USER_READERS


class StateUnreadable(AssertionError):
    """Spark could not load a checkpoint's state: a test failure, never a value to compare, so two
    failed reads can never pass an equality check."""


def read_state(spark, path: Path, batch: int, scenario: str) -> list[str]:
    """Sorted rows of every store at a batch; raises StateUnreadable when Spark cannot load it."""
    rows: list[str] = []
    for options in READERS.get(scenario, [{}]):
        reader = spark.read.format("statestore").option("batchId", batch)
        for key, value in options.items():
            reader = reader.option(key, value)
        try:
            rows += [f"{options}:{r!r}" for r in reader.load(str(path)).collect()]
        except Exception as exc:
            raise StateUnreadable(f"{path} batch {batch} {options}: {type(exc).__name__}: {exc}") from exc
    return sorted(rows)


def latest_state(spark, path: Path, scenario: str) -> list[str]:
    from checkpoint.model.checkpoint import load_checkpoint

    return read_state(spark, path, load_checkpoint(str(path)).latest_committed_batch, scenario)


def restart_like_untouched(
    spark, scenario, scenario_dir: Path, changed: Path, untouched: Path, extra: Path, max_files: int = 100_000
) -> int:
    """Restarts the real query on a changed checkpoint and on an untouched copy with the same new
    input; both must reach the same batch with the same state. Returns that batch. The untouched
    copy's restart is cached by what it read (`testbed.restart.untouched`)."""
    from checkpoint.model.checkpoint import load_checkpoint
    from testbed.restart import latest_batch
    from testbed.restart import untouched as untouched_restart

    def restarted(path: Path) -> dict:
        scenario.restart(spark, scenario_dir, path, extra, max_files)
        batch = latest_batch(path)  # the test support's count, not the product's, under the cache
        return {"batch": batch, "state": read_state(spark, path, batch, scenario.name)}

    control = untouched_restart(spark, "batch and state", scenario.name, scenario_dir, untouched,
                                {"max_files": max_files}, lambda: restarted(untouched))  # fmt: skip
    changed_now = restarted(changed)
    assert load_checkpoint(str(changed)).latest_committed_batch == changed_now["batch"] == control["batch"]
    assert changed_now["state"] == control["state"]
    return changed_now["batch"]


def control_state(spark, inputs: Path, checkpoint: Path, confs: dict[str, str]) -> list[str]:
    """The control: the same aggregation over all of `inputs` in one availableNow run, untouched by
    maintenance; its final state."""
    from jobs.spark_session import scoped_confs
    from testbed.queries import aggregation

    with scoped_confs(spark, confs):
        query = (
            aggregation(spark, {"": str(inputs)}, max_files=100_000)
            .writeStream.outputMode("update")
            .option("checkpointLocation", str(checkpoint))
            .format("noop")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    return latest_state(spark, checkpoint, "aggregation")
