"""Lineage compaction as an asset: the Spark job rebuilds snapshots for stores with long chains.

It runs after the audit assets, whose blocking checks stop it on any error finding. A commit
sensor requests it when a store of a checkpoint crosses the chain threshold or nears the cap.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import json

import dagster as dg

from assets.checkpoints import GROUP as AUDIT_GROUP
from assets.checkpoints import checkpoint_lineage_report
from checkpoint.compaction import plan_compaction
from checkpoint.errors import CheckpointError
from checkpoint.gc_plan import parse_duration
from checkpoint.lineage import checkpoint_lineage
from checkpoint.report import human_bytes
from orchestration.partitions import checkpoint_partitions, parse_partition_key
from orchestration.resources import CheckpointRootsResource, SparkResource

GROUP = "checkpoint_compaction"


@dg.asset(
    partitions_def=checkpoint_partitions, group_name=GROUP, deps=[checkpoint_lineage_report], kinds={"spark"}
)
def checkpoint_compaction(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource, spark: SparkResource
):
    """Snapshots materialised for every store whose recovery replays a long chain of changelogs."""
    from jobs.compact import run_compaction  # Spark is imported only when compaction runs

    key = context.partition_key
    try:
        ckpt = roots.load(key, strict=True)
        targets, skips = plan_compaction(
            ckpt, min_chain=roots.long_chain_threshold, quiet_seconds=parse_duration(roots.quiet_period)
        )
    except CheckpointError as exc:
        raise dg.Failure(description=f"no compaction plan for {key}: {exc}") from exc
    options = roots.root(parse_partition_key(key)[0]).storage_options
    context.log.info(f"{key}: {len(targets)} stores to compact, {len(skips)} skipped")
    results = (
        run_compaction(spark.session(), ckpt.url, [t.as_key() for t in targets], options) if targets else []
    )
    done = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    after = {}
    if targets:
        batch = targets[0].entry.batch
        reloaded = roots.load(key, strict=True)
        after = {(e.store.operator, e.store.partition, e.store.store): e.chain_length
                 for e in checkpoint_lineage(reloaded, batch)}  # fmt: skip
    rows = ["| store | version | chain before | chain after | seconds | keys | bytes written |",
            "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in done:
        store = (r["operator"], r["partition"], r["store"])
        cells = ["/".join(map(str, store)), r["version"], r["chain_before"], after.get(store), r["seconds"],
                 r["keys"], human_bytes(r["bytes_written"])]  # fmt: skip
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    metadata = {
        "stores_compacted": len(done),
        "stores_failed": len(failed),
        "stores_skipped": len(skips),
        "max_chain_before": max((r["chain_before"] for r in done), default=0),
        "max_chain_after": max(
            (after.get((r["operator"], r["partition"], r["store"]), 0) for r in done), default=0
        ),
        "seconds": round(sum(r["seconds"] for r in done), 3),
        "bytes_written": sum(r["bytes_written"] for r in done),
        "compacted": dg.MetadataValue.md("\n".join(rows) if done else "Nothing to compact."),
        "skipped": dg.MetadataValue.md(
            "\n".join(f"- {s.operator}/{s.partition}/{s.store}: {s.reason}" for s in skips[:50]) or "none"
        ),  # fmt: skip
    }
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} of {len(results)} stores failed: "
            + "; ".join(r["error"] for r in failed[:5]),
            metadata=metadata,
        )
    return dg.MaterializeResult(metadata=metadata)


compaction_job = dg.define_asset_job(
    "compact_checkpoints",
    selection=dg.AssetSelection.groups(AUDIT_GROUP, GROUP),
    description="Audit, then rebuild snapshots for stores with long replay chains (writes new files only).",
)


def needs_compaction(roots: CheckpointRootsResource, key: str) -> tuple[int | None, bool]:
    """(latest committed batch, whether a store crosses the threshold or nears the lineage cap)."""
    ckpt = roots.load(key)
    targets, _ = plan_compaction(ckpt, min_chain=roots.long_chain_threshold, quiet_seconds=0)
    return ckpt.latest_committed_batch, bool(targets)


@dg.sensor(job=compaction_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def checkpoint_commit_sensor(context: dg.SensorEvaluationContext, roots: CheckpointRootsResource):
    """On new commits, requests compaction where a chain crossed the threshold (one run per commit)."""
    seen: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
    requests = []
    for key in context.instance.get_dynamic_partitions(checkpoint_partitions.name):
        try:
            latest, crossing = needs_compaction(roots, key)
        except (CheckpointError, ValueError) as exc:
            context.log.warning(f"{key}: skipped this tick: {exc}")
            continue
        if latest is None or seen.get(key) == latest:
            continue
        seen[key] = latest
        if crossing:
            requests.append(dg.RunRequest(partition_key=key, run_key=f"compact:{key}:{latest}"))
    if not requests:
        return dg.SkipReason("no new commit crossed the compaction threshold")
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(seen, sort_keys=True))
