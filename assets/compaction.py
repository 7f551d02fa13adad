"""Lineage compaction as an asset: the Spark job rebuilds snapshots for stores with long chains.

It runs after the audit assets, whose blocking checks stop it on any error finding. A commit
sensor requests it when a store of a checkpoint crosses the chain threshold or nears the cap.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dagster as dg
from tabulate import tabulate

from assets.checkpoints import checkpoint_lineage_report
from assets.partitions import checkpoint_partitions
from assets.ranges import PER_CHECKPOINT, per_checkpoint
from assets.resources import CheckpointRootsResource, SparkResource, StepContext
from checkpoint.analysis import human_bytes
from checkpoint.compaction import CompactionOptions, RebuildResult, Task, compact_checkpoints
from checkpoint.model import Checkpoint
from checkpoint.safety import EachInPlace

if TYPE_CHECKING:
    from jobs.compact import StoreOutcome

GROUP = "checkpoint_compaction"
STORES_COMPACTED = "stores_compacted"  # a metadata key the fleet report reads back (`assets.history`)


def spark_rebuild(
    context: StepContext, spark: SparkResource
) -> "Callable[[list[Task], Callable[[Checkpoint], None]], list[StoreOutcome]]":
    """Compaction's rebuild in this run's Spark application: the stores of every checkpoint planned
    side by side, a Spark job each (`jobs.compact`)."""

    def rebuild(tasks: list[Task], check: Callable[[Checkpoint], None]) -> "list[StoreOutcome]":
        from jobs.compact import run_compaction_tasks  # Spark only when compaction runs

        checkpoints = len({ckpt.url for ckpt, _ in tasks})
        context.log.info(f"{len(tasks)} stores to compact in {checkpoints} checkpoint(s), a Spark job each")
        return run_compaction_tasks(spark.session(), tasks, check)

    return rebuild


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    deps=[checkpoint_lineage_report],
    kinds={"spark"},
    # A UI backfill over many checkpoints is one run and one Spark job, not a Spark session each.
    backfill_policy=dg.BackfillPolicy.single_run(),
    # Such a run carries a partition range, not a partition, so the per-checkpoint run limit of
    # dagster.yaml cannot see it: the pool (limit 1 there) keeps two compactions from ever overlapping.
    pool="ckpt_compaction",
)
def checkpoint_compaction(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource, spark: SparkResource
):
    """Snapshots materialised for every store whose recovery replays a long chain of changelogs."""
    # One checkpoint: its lease waited for, the step retried, then failed. A backfill: a checkpoint
    # held elsewhere is reported (LeaseHeld) with the unreadable ones, and the others go on.
    alone = len(context.partition_keys) == 1
    request = EachInPlace(context.partition_keys, lambda key: roots.in_place(context, key, retry=alone))
    options = CompactionOptions(spark_rebuild(context, spark), roots.compaction_plan_options(), strict=True,
                                go_on=True, what="checkpoint_compaction")  # fmt: skip
    compaction = compact_checkpoints(request, options)
    planned, results = compaction.planned, compaction.outcomes
    rows: list[list] = []
    done: list[RebuildResult] = []
    failed, lengths_after = [r for r in results if not r.ok], []
    for p in planned:
        after = compaction.chains_after.get(p.name, {})
        for r in results:
            rebuilt = r.rebuilt
            if rebuilt is None or r.url != p.ckpt.url:
                continue
            store = r.store
            done.append(rebuilt)
            lengths_after.append(after.get(store, 0))
            rows.append([p.name, store.label, rebuilt.version, r.chain_before,
                         after.get(store), rebuilt.seconds, rebuilt.records, rebuilt.keys,
                         human_bytes(rebuilt.bytes_read), human_bytes(rebuilt.bytes_written),
                         human_bytes(rebuilt.peak_rss_bytes)])  # fmt: skip
    table = tabulate(rows, tablefmt="github", headers=["checkpoint", "store", "version", "chain before",
                     "chain after", "seconds", "records", "keys", "read", "written", "peak RSS"])  # fmt: skip
    skips = [f"- {p.name} {s.operator}/{s.partition}/{s.store}: {s.reason}" for p in planned for s in p.skips]
    metadata: dict[str, Any] = {
        "checkpoints": len(context.partition_keys),
        STORES_COMPACTED: len(done),
        "stores_failed": len(failed),
        "stores_skipped": len(skips),
        "max_chain_before": max((r.chain_before for r in results if r.ok), default=0),
        "max_chain_after": max(lengths_after, default=0),
        "seconds": round(sum(r.seconds for r in done), 3),
        "bytes_written": sum(r.bytes_written for r in done),
        "bytes_read": sum(r.bytes_read for r in done),
        # changelog records replayed by the rebuild; Spark's provider counts none of its deltas
        "records": sum(r.records or 0 for r in done),
        # one worker rebuilds one store at a time: the largest store's peak is what a worker needs
        "max_peak_rss_bytes": max((r.peak_rss_bytes for r in done), default=0),
        "compacted": dg.MetadataValue.md(table if done else "Nothing to compact."),
        "skipped": dg.MetadataValue.md("\n".join(skips[:50]) or "none"),
        "failed": dg.MetadataValue.md(
            "\n".join(f"- {r.url} {r.store.label}: {r.error}" for r in failed) or "none"
        ),
    }
    if len(context.partition_keys) > 1:  # each checkpoint's own count, for the fleet report's row
        compacted = Counter(row[0] for row in rows)
        metadata[PER_CHECKPOINT] = per_checkpoint(
            {key: {STORES_COMPACTED: compacted.get(key, 0)} for key in context.partition_keys}
        )
    problems = [*map(str, compaction.refused), *(f"{r.url} {r.store}: {r.error}" for r in failed)]
    if problems:
        raise dg.Failure(
            description=f"{len(problems)} problem(s): " + "; ".join(problems[:5]), metadata=metadata
        )
    return dg.MaterializeResult(metadata=metadata)
