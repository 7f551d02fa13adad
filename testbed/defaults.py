"""A third corpus: checkpoints as Spark writes them by default, which most of a real fleet is.

Spark's defaults in 4.0-4.3 are the HDFS-backed state store and checkpoint format V1, with
RocksDB's changelog checkpointing off; a checkpoint keeps its provider and format for ever. Each
scenario here runs one of the main corpus's queries (or an operator only this corpus needs) under
those defaults, or under RocksDB with format V1:

- the HDFS-backed store (`<v>.delta`, `<v>.snapshot`), with Spark's own snapshots (its maintenance
  every 10 deltas, as by default) and without (a delta-only chain), for every operator the
  provider supports;
- RocksDB format V1 with changelog checkpointing (`<v>.changelog`, a `<v>.zip` every 10 versions)
  and without (a `<v>.zip` for every version), and every operator a migration carries from it,
  transformWithState's state variables (column families) among them;
- a driver killed mid-batch and a task retried after its state commit, on the HDFS-backed store.

Kept apart from the other corpora (its own version and cache), generated once and cached.

    python -m testbed.defaults OUT_DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

from checkpoint.format import (
    CHANGELOG_CONF,
    FORMAT_VERSION_CONF,
    HDFS_PROVIDER,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
)
from testbed import corpus
from testbed.cache import corpus_base, ensure_generated
from testbed.corpus import JOIN_INPUTS, generate
from testbed.operators import (
    NO_EMPTY_BATCHES,
    _events,
    every_state,
    pandas_with_state,
    session_window_count,
    timers,
)
from testbed.queries import (
    NO_SNAPSHOTS,
    aggregation,
    dedup_then_aggregation,
    list_state,
    stream_join,
    windowed_aggregation,
)
from testbed.scenarios import KilledScenario, Scenario, run_killed_child
from testbed.sinks import _retry_sink

DEFAULTS_VERSION = 4

# Spark's own defaults, stated rather than left out: the generator's session sets RocksDB V2.
HDFS = {
    PROVIDER_CONF: HDFS_PROVIDER,
    FORMAT_VERSION_CONF: "1",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "10",
}
ROCKSDB_V1 = {
    PROVIDER_CONF: ROCKSDB_PROVIDER,
    FORMAT_VERSION_CONF: "1",
    CHANGELOG_CONF: "false",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "10",
}
CHANGELOGS = {CHANGELOG_CONF: "true"}
# transformWithState on RocksDB format V1: changelogs (v2: column families, merge records) and a
# zip every other version, which names the families' ids (a V1 changelog does not)
TWS_V1 = {**ROCKSDB_V1, **CHANGELOGS, "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}
# Enough batches for Spark's maintenance to write two snapshots at its default of every 10 deltas.
LONG = 25


def dedup_within_watermark(spark, paths: dict[str, str], max_files: int = 1):
    return _events(spark, paths, max_files).dropDuplicatesWithinWatermark(["k", "v"])


class DefaultsKilled(KilledScenario):
    child_module = "testbed.defaults"


DEFAULT_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("hdfs_agg", "HDFS-backed store, Spark's defaults: aggregation, snapshots by Spark's maintenance",
             aggregation, LONG, HDFS),
    Scenario("hdfs_deltas", "HDFS-backed store without snapshots: a delta-only chain",
             aggregation, 12, {**HDFS, **NO_SNAPSHOTS}),
    Scenario("hdfs_dedup", "HDFS-backed store: dropDuplicates then aggregation, two operators",
             dedup_then_aggregation, 12, HDFS),
    Scenario("hdfs_dedup_watermark", "HDFS-backed store: dropDuplicatesWithinWatermark",
             dedup_within_watermark, 8, HDFS, output_mode="append"),
    Scenario("hdfs_join", "HDFS-backed store: stream-stream join, four stores per partition",
             stream_join, 8, HDFS, inputs=JOIN_INPUTS, output_mode="append"),
    Scenario("hdfs_window", "HDFS-backed store: windowed aggregation with a watermark",
             windowed_aggregation, 12, HDFS, output_mode="append"),
    Scenario("hdfs_session", "HDFS-backed store: session windows",
             session_window_count, 8, HDFS, output_mode="append"),
    Scenario("hdfs_pandas", "HDFS-backed store: applyInPandasWithState",
             pandas_with_state, 8, HDFS),
    Scenario("hdfs_retry", "HDFS-backed store: a task fails after its state commit and is retried",
             aggregation, 5, HDFS, sink=_retry_sink),
    DefaultsKilled("hdfs_killed",
                   "HDFS-backed store: driver SIGKILLed mid-batch, copies before and after the restart",
                   aggregation, 6, HDFS),
    Scenario("rocksdb_v1", "RocksDB format V1 without changelogs: a zip for every version",
             aggregation, 12, ROCKSDB_V1),
    Scenario("rocksdb_v1_changelog", "RocksDB format V1 with changelog checkpointing: zips from maintenance",
             aggregation, LONG, {**ROCKSDB_V1, **CHANGELOGS}),
    Scenario("rocksdb_v1_session", "RocksDB format V1: session windows, prefix-encoded keys",
             session_window_count, 8, ROCKSDB_V1, output_mode="append"),
    Scenario("rocksdb_v1_dedup", "RocksDB format V1: dropDuplicates then aggregation, two operators",
             dedup_then_aggregation, 12, ROCKSDB_V1),
    Scenario("rocksdb_v1_join", "RocksDB format V1: stream-stream join, four stores per partition",
             stream_join, 8, ROCKSDB_V1, inputs=JOIN_INPUTS, output_mode="append"),
    Scenario("rocksdb_v1_window", "RocksDB format V1: windowed aggregation with a watermark",
             windowed_aggregation, 12, ROCKSDB_V1, output_mode="append"),
    Scenario("rocksdb_v1_pandas", "RocksDB format V1: applyInPandasWithState",
             pandas_with_state, 8, ROCKSDB_V1),
    Scenario("rocksdb_v1_list_state", "RocksDB format V1: transformWithState with a ListState",
             list_state, 6, TWS_V1),
    Scenario("rocksdb_v1_every_state", "RocksDB format V1: transformWithState, value, list and map state, "
             "each with a TTL", every_state, 6, {**TWS_V1, **NO_EMPTY_BATCHES}),
    Scenario("rocksdb_v1_timers", "RocksDB format V1: transformWithState with event-time timers",
             timers, 6, TWS_V1),
)  # fmt: skip


def scenario_named(name: str) -> Scenario:
    return corpus.scenario_named(name, DEFAULT_SCENARIOS)


def default_cache_dir() -> Path:
    return corpus_base().parent / f"defaults-v{DEFAULTS_VERSION}"


def ensure_defaults_corpus(cache: Path | None = None, log=print) -> Path:
    """The cached corpus of default formats, generated in a child process first when it is
    missing (as `corpus.ensure_corpus`)."""
    return ensure_generated(
        cache or default_cache_dir(), ["-m", "testbed.defaults"], "the corpus of default formats", log
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--killed-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.killed_child:
        run_killed_child(args.out, scenario_named(args.out.name))
        return
    generate(args.out, args.only, scenarios=DEFAULT_SCENARIOS, version=DEFAULTS_VERSION)


if __name__ == "__main__":
    main()
