"""A second corpus: one real checkpoint for each stateful operator the main corpus lacks, the ones
Spark's repartitioner supports besides aggregation, dedup, joins and a ListState.

Kept apart from the main corpus (its own version and cache) so that adding an operator here does
not regenerate every other checkpoint. Inputs are the main corpus's (`_keyed_rows`); every query is
deterministic under a restart: event-time timers and a watermark, TTLs far longer than a test.

    python -m testbed.operators OUT_DIR
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from checkpoint.format import JOIN_STATE_FORMAT_CONF
from jobs.spark_session import scoped_confs
from testbed.cache import corpus_base, ensure_generated
from testbed.corpus import JOIN_INPUTS, SCENARIOS, generate
from testbed.generators import _wait_for_snapshot
from testbed.queries import (
    FORMAT_V1,
    FREQUENT_SNAPSHOTS,
    NO_SNAPSHOTS,
    _run,
    _StatefulProcessor,
    _stream,
    stream_join,
)
from testbed.scenarios import KilledScenario, Scenario, run_killed_child, run_until_killed
from testbed.sinks import _killing_sink

OPERATORS_VERSION = 4
_HOUR_MS = 3_600_000
# An expiring query's two TTLs: one no cache outlives, one every entry outlives by the next batch.
_DECADE_MS = 10 * 365 * 24 * _HOUR_MS
_EXPIRES_MS = 1
# A processing-time timer no restart reaches (2100-01-01).
_NEVER_DUE_MS = 4_102_444_800_000
# A processing-time TTL asks for a no-data batch after every batch: availableNow would never end.
NO_EMPTY_BATCHES = {
    "spark.sql.streaming.noDataMicroBatches.enabled": "false"
}  # a TTL no test outlives: nothing expires between two copies' restarts


def _events(spark, paths: dict[str, str], max_files: int):
    from pyspark.sql import functions as F

    return (
        _stream(spark, paths[""], max_files)
        .withColumn("ts", F.timestamp_seconds("id"))
        .withWatermark("ts", "5 seconds")
    )


def session_window_count(spark, paths: dict[str, str], max_files: int = 1):
    from pyspark.sql import functions as F

    return (
        _events(spark, paths, max_files)
        .groupBy(F.session_window("ts", "5 seconds"), "k")
        .agg(F.count("*").alias("n"))
    )


def _running_total(key, pdfs, state):
    """applyInPandasWithState: a running count and sum of `v` per key."""
    import pandas as pd

    n, total = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        n, total = n + len(pdf), total + int(pdf["v"].sum())
    state.update((n, total))
    yield pd.DataFrame({"k": [key[0]], "n": [n], "total": [total]})


def pandas_with_state(spark, paths: dict[str, str], max_files: int = 1):
    return (
        _stream(spark, paths[""], max_files)
        .groupBy("k")
        .applyInPandasWithState(
            _running_total,
            outputStructType="k string, n long, total long",
            stateStructType="n long, total long",
            outputMode="Update",
            timeoutConf="NoTimeout",
        )
    )


class EveryState(_StatefulProcessor):
    """transformWithStateInPandas with a ValueState, a ListState and a MapState, each with a TTL (so
    each has its TTL column family too): processing time, which TTLs need."""

    def __init__(self, ttl_ms: int = _HOUR_MS):
        self.ttl_ms = ttl_ms

    def init(self, handle) -> None:
        self.count = handle.getValueState("count", "n long", ttlDurationMs=self.ttl_ms)
        self.items = handle.getListState("items", "v long", ttlDurationMs=self.ttl_ms)
        self.last = handle.getMapState("last", "v long", "id long", ttlDurationMs=self.ttl_ms)

    def handleInputRows(self, key, rows, timerValues) -> Iterator:
        import pandas as pd

        n = self.count.get()[0] if self.count.exists() else 0
        for pdf in rows:
            for v, i in zip(pdf["v"], pdf["id"], strict=True):
                n += 1
                self.items.appendValue((int(v),))
                self.last.updateValue((int(v),), (int(i),))
        self.count.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def close(self) -> None:
        pass


class Timers(_StatefulProcessor):
    """transformWithStateInPandas with event-time timers (deterministic under a restart, unlike
    processing-time ones): a key's timer fires 30 s of event time after its last event."""

    def init(self, handle) -> None:
        self.handle = handle
        self.seen = handle.getValueState("seen", "n long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator:
        import pandas as pd

        n = self.seen.get()[0] if self.seen.exists() else 0
        for pdf in rows:
            n += len(pdf)
            self.handle.registerTimer(int(pdf["id"].max()) * 1000 + 30_000)
        self.seen.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator:
        import pandas as pd

        yield pd.DataFrame({"k": [key[0]], "n": [-expiredTimerInfo.getExpiryTimeInMs()]})

    def close(self) -> None:
        pass


def every_state(spark, paths: dict[str, str], max_files: int = 1, ttl_ms: int = _HOUR_MS):
    return (
        _stream(spark, paths[""], max_files)
        .groupBy("k")
        .transformWithStateInPandas(EveryState(ttl_ms), "k string, n long", "Update", "ProcessingTime")
    )


def expiring_state(spark, paths: dict[str, str], max_files: int = 1):
    return every_state(spark, paths, max_files, ttl_ms=_EXPIRES_MS)


class ExpiringScenario(Scenario):
    """`every_state` run twice: its first batches with a TTL of ten years, then the same query with a
    TTL of 1 ms (Spark lets a TTL change between runs; entries keep the expiry they were written
    with). Once the query stops, what its last batch wrote has expired and what the first run
    wrote has not: a value, a map entry or a list element of either kind, and lists that hold both.
    The first run snapshots (a store of column families needs a zip to name them), the second does
    not, so the latest version is a changelog on a zip, as a purge finds it."""

    first_run = 3

    def build(self, spark, out: Path) -> dict:
        checkpoint = out / "checkpoint"
        self.write_inputs(out, self.first_run)
        with scoped_confs(spark, self.confs):
            _run(every_state(spark, self.paths(out), 1, ttl_ms=_DECADE_MS), checkpoint)
        _wait_for_snapshot(checkpoint, stores=int(spark.conf.get("spark.sql.shuffle.partitions")))
        self.write_inputs(out, self.batches - self.first_run, start=self.first_run)
        with scoped_confs(spark, {**self.confs, **NO_SNAPSHOTS}):
            _run(self.query(spark, self.paths(out), 1), checkpoint)
        return {"batches": self.batches, "ttl_ms": [_DECADE_MS, _EXPIRES_MS]}


class TimedState(EveryState):
    """`EveryState` with processing-time timers at fixed instants, so that a restart fires the same
    ones whenever it runs: one at the key's last event id in ms (1970: due in the batch that sets
    it) and one in 2100 (never due: a registered timer that a purge must keep)."""

    def init(self, handle) -> None:
        super().init(handle)
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues) -> Iterator:
        rows = list(rows)
        yield from super().handleInputRows(key, iter(rows), timerValues)
        last = max(int(pdf["id"].max()) for pdf in rows)
        self.handle.registerTimer(last)
        self.handle.registerTimer(_NEVER_DUE_MS + last)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator:
        import pandas as pd

        yield pd.DataFrame({"k": [key[0]], "n": [-expiredTimerInfo.getExpiryTimeInMs()]})


def timed_state(spark, paths: dict[str, str], max_files: int = 1, ttl_ms: int = _EXPIRES_MS):
    return (
        _stream(spark, paths[""], max_files)
        .groupBy("k")
        .transformWithStateInPandas(TimedState(ttl_ms), "k string, n long", "Update", "ProcessingTime")
    )


class StoppedMidBatch(ExpiringScenario, KilledScenario):
    """`expiring` with processing-time timers, as users run it: its second run on a processing-time
    trigger with no-data batches on (a processing-time TTL asks for one after every batch), its
    driver killed in the no-data batch after the last input, as a stop usually finds such a query:
    offset N written, commit N not. What batch N - 1 wrote has expired as of batch N's time; what
    the first run wrote has not. A restart (no-data batches off, so that it ends) replays batch N."""

    child_module = "testbed.operators"

    def build(self, spark, out: Path) -> dict:
        checkpoint = out / "checkpoint"
        self.write_inputs(out, self.first_run)
        with scoped_confs(spark, self.confs):
            _run(self.query(spark, self.paths(out), 1, ttl_ms=_DECADE_MS), checkpoint)
        _wait_for_snapshot(checkpoint, stores=int(spark.conf.get("spark.sql.shuffle.partitions")))
        self.write_inputs(out, self.batches - self.first_run, start=self.first_run)
        run_until_killed(out, self.child_module)
        return {
            "batches": self.batches,
            "ttl_ms": [_DECADE_MS, _EXPIRES_MS],
            "stopped_in_batch": self.batches,
        }

    def killed_run(self, spark, out: Path, marker: Path) -> None:
        confs = {**self.confs, **NO_SNAPSHOTS, **{k: "true" for k in NO_EMPTY_BATCHES}}
        with scoped_confs(spark, confs):
            query = (
                self.query(spark, self.paths(out), 1)
                .writeStream.outputMode(self.output_mode)
                .option("checkpointLocation", str(out / "checkpoint"))
                .foreachBatch(_killing_sink(marker, at=self.batches))  # the no-data batch after the inputs
                .trigger(processingTime="1 second")
                .start()
            )
            query.awaitTermination()


def timers(spark, paths: dict[str, str], max_files: int = 1):
    return (
        _events(spark, paths, max_files)
        .groupBy("k")
        .transformWithStateInPandas(Timers(), "k string, n long", "Update", "EventTime")
    )


OPERATOR_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("session_window", "session windows with a watermark: sessions merged and evicted",
             session_window_count, 6, FREQUENT_SNAPSHOTS, output_mode="append"),
    Scenario("pandas_state", "applyInPandasWithState: a running total per key",
             pandas_with_state, 6, FREQUENT_SNAPSHOTS),
    Scenario("every_state", "transformWithStateInPandas: value, list and map state, each with a TTL",
             every_state, 6, {**FREQUENT_SNAPSHOTS, **NO_EMPTY_BATCHES}),
    Scenario("timers", "transformWithStateInPandas: event-time timers", timers, 6, FREQUENT_SNAPSHOTS),
    ExpiringScenario("expiring", "transformWithStateInPandas: value, list and map state, expired and not",
                     expiring_state, 6, {**FREQUENT_SNAPSHOTS, **NO_EMPTY_BATCHES}),
    ExpiringScenario("expiring_v1", "the same in format V1 (`<v>.zip`, `<v>.changelog`)",
                     expiring_state, 6, {**FREQUENT_SNAPSHOTS, **NO_EMPTY_BATCHES, **FORMAT_V1}),
    StoppedMidBatch("stopped_midbatch", "transformWithStateInPandas: TTLs and processing-time timers, "
                    "no-data batches on, the driver gone mid-batch", timed_state, 6,
                    {**FREQUENT_SNAPSHOTS, **NO_EMPTY_BATCHES}),
    StoppedMidBatch("stopped_midbatch_v1", "the same in format V1", timed_state, 6,
                    {**FREQUENT_SNAPSHOTS, **NO_EMPTY_BATCHES, **FORMAT_V1}),
    Scenario("join_cf_v1", "stream-stream join, state format 3 (column families), in checkpoint format V1",
             stream_join, 6, {**FREQUENT_SNAPSHOTS, **FORMAT_V1, JOIN_STATE_FORMAT_CONF: "3"},
             inputs=JOIN_INPUTS, output_mode="append"),
)  # fmt: skip


def scenario_named(name: str) -> Scenario:
    for scenario in SCENARIOS + OPERATOR_SCENARIOS:
        if scenario.name == name:
            return scenario
    raise KeyError(name)


def default_cache_dir() -> Path:
    return corpus_base().parent / f"operators-v{OPERATORS_VERSION}"


def ensure_operator_corpus(cache: Path | None = None, log=print) -> Path:
    """The cached operator corpus, generated in a child process first when it is missing (as
    `corpus.ensure_corpus`: its own SparkContext, generated in place, the manifest written last)."""
    return ensure_generated(
        cache or default_cache_dir(), ["-m", "testbed.operators"], "the operator corpus", log
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--killed-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.killed_child:
        run_killed_child(args.out, scenario_named(args.out.name))
        return
    generate(args.out, scenarios=OPERATOR_SCENARIOS, version=OPERATORS_VERSION)


if __name__ == "__main__":
    main()
