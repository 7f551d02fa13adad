"""A corpus of checkpoints written by real PySpark streaming queries.

Every scenario reads deterministic JSON files with a file source, one file per micro-batch
(`maxFilesPerTrigger=1`, `availableNow`), so the state at any batch can be recomputed with a batch
query over the first N input files. The corpus is generated once per generator version and cached
outside the repository; tests and the demo share it.

Run `python -m testbed.corpus OUT_DIR` to generate into OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from testbed.cache import MANIFEST, corpus_base, ensure_generated
from testbed.generators import (
    LONG_CHAIN_STATES,
    generate_big_base,
    generate_long_chain,
    generate_rescue,
)
from testbed.queries import (
    FORMAT_V1,
    FREQUENT_SNAPSHOTS,
    NO_SNAPSHOTS,
    _dedup_rows,
    _join_right_rows,
    _keyed_rows,
    aggregation,
    dedup_then_aggregation,
    list_state,
    stream_join,
    windowed_aggregation,
)
from testbed.scenarios import KilledScenario, Scenario, run_killed_child
from testbed.sinks import (
    _noop_sink,
    _retry_sink,
    _two_actions_sink,
)

# Bump whenever a scenario, its inputs or its Spark confs change: it keys the on-disk cache.
GENERATOR_VERSION = 3

# Long enough to be a real delta-only chain (the issue asks for >= 30 batches).
LONG_CHAIN_BATCHES = 32


JOIN_INPUTS = {"left": _keyed_rows, "right": _join_right_rows}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("long_chain", "aggregation with snapshots disabled: a delta-only chain of changelogs",
             aggregation, LONG_CHAIN_BATCHES, NO_SNAPSHOTS),
    Scenario("snapshots", "aggregation with a snapshot every 2 deltas: zips and SSTs",
             aggregation, 12, FREQUENT_SNAPSHOTS),
    Scenario("watermark", "windowed aggregation with a watermark: evicted windows become DELETE records",
             windowed_aggregation, 8, FREQUENT_SNAPSHOTS, output_mode="append"),
    Scenario("retention", "minBatchesToRetain=3: Spark already pruned old logs and state files",
             aggregation, 16, {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.minBatchesToRetain": "3"}),
    KilledScenario("killed", "driver SIGKILLed mid-batch: copies before and after the restart",
                   aggregation, 6, NO_SNAPSHOTS, sink=_noop_sink),
    Scenario("zstd", "changelogs compressed with zstd instead of the default lz4",
             aggregation, 5, {**NO_SNAPSHOTS, "spark.sql.streaming.stateStore.compression.codec": "zstd"}),
    Scenario("task_retry", "a task fails after its state commit and is retried: two ids for some versions",
             aggregation, 5, NO_SNAPSHOTS, sink=_retry_sink),
    Scenario("two_actions", "foreachBatch running two actions per batch: two ids for every version",
             aggregation, 5, FREQUENT_SNAPSHOTS, sink=_two_actions_sink),
    Scenario("dedup_agg", "dropDuplicates then aggregation: two stateful operators",
             dedup_then_aggregation, 8, FREQUENT_SNAPSHOTS, inputs={"": _dedup_rows}),
    Scenario("join", "stream-stream join, state format 2: four stores per partition",
             stream_join, 6, {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.join.stateFormatVersion": "2"},
             inputs=JOIN_INPUTS, output_mode="append"),
    Scenario("join_cf", "stream-stream join, state format 3: column families, changelog v4",
             stream_join, 6, {**FREQUENT_SNAPSHOTS, "spark.sql.streaming.join.stateFormatVersion": "3"},
             inputs=JOIN_INPUTS, output_mode="append"),
    Scenario("list_state", "transformWithStateInPandas with a ListState: column families and MERGE records",
             list_state, 6, FREQUENT_SNAPSHOTS),
    Scenario("format_v1", "checkpoint format V1 for contrast: no ids in file names or the commit log",
             aggregation, 6, {**FREQUENT_SNAPSHOTS, **FORMAT_V1}),
)  # fmt: skip


def scenario_named(name: str, scenarios: tuple[Scenario, ...] = SCENARIOS) -> Scenario:
    """The scenario that wrote a corpus checkpoint (`killed_before_restart` -> `killed`)."""
    base = name.split("_before")[0].split("_after")[0]
    for scenario in scenarios:
        if scenario.name == base:
            return scenario
    raise KeyError(name)


def generate(
    out: Path,
    names: list[str] | None = None,
    log=print,
    scenarios: tuple[Scenario, ...] | None = None,
    version: int = GENERATOR_VERSION,
) -> dict:
    """Run the scenarios into `out` (which must not exist) and write its manifest last."""
    from jobs.spark_session import local_session

    out.mkdir(parents=True)
    # local[2,4]: two threads, and a failed task is retried up to 4 times (the task_retry scenario).
    spark = local_session(master="local[2,4]", app_name="ckpt-corpus")
    manifest: dict = {
        "generator_version": version,
        "spark_version": spark.version,
        "scenarios": {},
    }
    try:
        for scenario in SCENARIOS if scenarios is None else scenarios:
            if names and scenario.name not in names:
                continue
            started = time.monotonic()
            log(f"corpus: {scenario.name}: {scenario.description} ...")
            facts = scenario.build(spark, out / scenario.name)
            facts["seconds"] = round(time.monotonic() - started, 1)
            facts["description"] = scenario.description
            manifest["scenarios"][scenario.name] = facts
            log(f"corpus: {scenario.name}: done in {facts['seconds']} s")
    finally:
        spark.stop()
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def checkpoints(root: Path) -> dict[str, Path]:
    """Every checkpoint folder of a generated corpus, by name (`killed` gives two)."""
    found = {}
    for scenario in sorted(p for p in root.iterdir() if p.is_dir()):
        for ckpt in sorted(scenario.glob("checkpoint*")):
            suffix = ckpt.name[len("checkpoint") :]
            found[scenario.name + suffix] = ckpt
    return found


def default_cache_dir() -> Path:
    return corpus_base() / f"v{GENERATOR_VERSION}"


def _prune_older_generations(cache: Path) -> None:
    """Corpora of older generator versions are never read again; each holds real queries' output."""
    if not cache.parent.is_dir():
        return
    for old in cache.parent.glob("v*"):
        if old != cache and old.name[1:].isdigit() and int(old.name[1:]) < GENERATOR_VERSION:
            shutil.rmtree(old, ignore_errors=True)


def ensure_corpus(cache: Path | None = None, log=print) -> Path:
    """The cached corpus, generated in a child process first when it is missing.

    A child process keeps the generator's SparkContext (local[2,4], its own maintenance thread)
    apart from the caller's. The corpus is generated in place, never moved: operator metadata v2
    records absolute schema file paths. The manifest is written last and marks it complete.
    """
    if cache is None:
        cache = default_cache_dir()
        _prune_older_generations(cache)
    return ensure_generated(
        cache, ["-m", "testbed.corpus"], f"the corpus (generator v{GENERATOR_VERSION})", log
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Generate the corpus of real streaming checkpoints.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--killed-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rescue", action="store_true", help="generate the lineage-overflow checkpoint only")
    parser.add_argument("--big-base", nargs=4, type=int, metavar=("KEYS", "TOUCH", "CHAIN", "RECORDS"),
                        help="generate one big-base checkpoint only")  # fmt: skip
    parser.add_argument("--long-chain", nargs=2, type=int, metavar=("RECORDS", "CHANGELOGS"),
                        help="generate one delta-only chain of a store only")  # fmt: skip
    parser.add_argument("--state", default="rocksdb_v2", choices=LONG_CHAIN_STATES,
                        help="the state format of the big base (not join_cf) or the chain")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=1, help="the big base's partitions")
    args = parser.parse_args(argv)
    if args.killed_child:
        run_killed_child(args.out, scenario_named(args.out.name))
        return
    if args.rescue:
        generate_rescue(args.out)
        return
    if args.big_base:
        generate_big_base(args.out, *args.big_base, state=args.state, partitions=args.partitions)
        return
    if args.long_chain:
        generate_long_chain(args.out, *args.long_chain, state=args.state)
        return
    generate(args.out, args.only)


if __name__ == "__main__":
    main()
