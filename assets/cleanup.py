"""Orphan cleanup as assets: plan -> blocking check -> apply (only when asked), per checkpoint.

The plan is a durable manifest in the audit trail; the apply asset deletes only when the run asks
for it (run config `apply: true`, or the run tag `ckpt/apply=true`): a run launched from the UI is
a dry run by default.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dataclasses

import dagster as dg
from pydantic import Field

from assets import markdown
from assets.checkpoints import checkpoint_lineage_report
from assets.compaction import checkpoint_compaction
from assets.partitions import checkpoint_partitions, parse_partition_key
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import human_bytes
from checkpoint.cleanup import Plan, apply_cleanup, check_plan, plan_gc
from checkpoint.errors import CheckpointError
from checkpoint.policy import parse_duration

GROUP = "checkpoint_cleanup"
PLAN_CHECK = "plan_matches_commit_log"
APPLY_TAG = "ckpt/apply"
MANIFEST = "manifest"  # the plan asset's metadata entry that names its manifest
# ... and the one that pins its bytes: the apply checks the manifest against this record in
# Dagster's event log, never against anything the manifest says of itself.
MANIFEST_SHA256 = "manifest_sha256"


def _totals_markdown(totals: dict[str, dict[str, int]], what: str) -> str:
    if not totals:
        return f"No {what}."
    rows = [(k, v["files"], human_bytes(v["bytes"])) for k, v in totals.items()]
    return markdown.table((what, "files", "bytes"), rows)


def plan_cleanup(roots: CheckpointRootsResource, key: str) -> Plan:
    """Plans the checkpoint's cleanup (a partition listed at a time) into its audit trail."""
    return plan_gc(
        roots.checkpoint_storage(key),
        roots.audit_trail(key),
        grace_seconds=parse_duration(roots.grace),
        retain_batches=roots.retain_batches,
        quiet_seconds=parse_duration(roots.quiet_period),
        query_stopped=roots.root(parse_partition_key(key)[0]).queries_stopped,
    )


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    # The audit's blocking checks gate every change; planning after compaction (when both run)
    # keeps the plan from racing the new snapshot's files.
    deps=[checkpoint_lineage_report, checkpoint_compaction],
    check_specs=[
        dg.AssetCheckSpec(
            PLAN_CHECK,
            asset="checkpoint_orphan_plan",
            blocking=True,
            description="The commit log the plan was made against is still there, unchanged",
        )
    ],
)
def checkpoint_orphan_plan(context: dg.AssetExecutionContext, roots: CheckpointRootsResource):
    """Files no batch will ever read again, with the reason for each: a manifest in the audit
    trail, which the cleanup reads back (its path is in this materialization's metadata; nothing
    of the plan goes through an IO manager)."""
    try:
        plan = plan_cleanup(roots, context.partition_key)
    except CheckpointError as exc:
        raise dg.Failure(description=f"no plan for {context.partition_key}: {exc}") from exc
    storage = roots.checkpoint_storage(context.partition_key)
    verdict = check_plan(plan, storage)
    pruned = roots.audit_trail(context.partition_key).prune(storage.url, plan.planned_at)
    return dg.MaterializeResult(
        metadata={
            "files": plan.files,
            "bytes": plan.total_bytes,
            "size": human_bytes(plan.total_bytes),
            "against_batch": plan.against_batch,
            "live_query": plan.live,
            "retained_files": plan.retained_files,
            MANIFEST: dg.MetadataValue.path(plan.manifest),
            MANIFEST_SHA256: plan.digest,
            "by_reason": dg.MetadataValue.md(_totals_markdown(plan.by_reason, "reason")),
            "by_store": dg.MetadataValue.md(_totals_markdown(plan.by_store, "store")),
            "not_yet": ", ".join(f"{n} {why}" for why, n in plan.kept.items()) or "none",
            "audit_plans_removed": len(pruned),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=PLAN_CHECK,
                passed=verdict.ok,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={"verdict": verdict.message, "newest_commit": verdict.newest_commit},
            )
        ],
    )


class CleanupConfig(dg.Config):
    apply: bool = Field(default=False, description="Delete the planned files; false: a dry run")


def _latest_plan(context: dg.AssetExecutionContext, roots: CheckpointRootsResource) -> Plan:
    """The plan this partition's plan asset last wrote: its header, read from the manifest."""
    found = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=checkpoint_orphan_plan.key, asset_partitions=[context.partition_key]),
        limit=1,
    ).records
    entry = found[0].asset_materialization if found else None
    manifest = entry.metadata.get(MANIFEST) if entry else None
    digest = entry.metadata.get(MANIFEST_SHA256) if entry else None
    if manifest is None:
        raise dg.Failure(description=f"{context.partition_key}: no cleanup plan yet (materialize the plan)")
    plan = roots.audit_trail(context.partition_key).read_plan(str(manifest.value))
    # No digest recorded (a plan made before digests were): the apply refuses it, plan again.
    return dataclasses.replace(plan, digest=str(digest.value) if digest is not None else "")


@dg.asset(partitions_def=checkpoint_partitions, group_name=GROUP, deps=[checkpoint_orphan_plan])
def checkpoint_orphan_cleanup(
    context: dg.AssetExecutionContext, config: CleanupConfig, roots: CheckpointRootsResource
):
    """Deletes the plan's files when asked; every outcome goes to the audit trail."""
    plan = _latest_plan(context, roots)
    apply = config.apply or context.run.tags.get(APPLY_TAG, "").lower() == "true"
    if not apply:
        return dg.MaterializeResult(
            metadata={
                "applied": False,
                "would_delete_files": plan.files,
                "would_delete_bytes": plan.total_bytes,
                "note": "dry run: launch with run config `apply: true` or the tag ckpt/apply=true to delete",
            }
        )
    audit = roots.audit_trail(context.partition_key)
    try:
        # The plan step ran before this lease was taken: planned again under it when the query ran since.
        cleaned = apply_cleanup(roots.in_place(context, context.partition_key), audit,
                                lambda: plan_cleanup(roots, context.partition_key), what="checkpoint_orphan_cleanup",
                                planned=plan)  # fmt: skip
    except CheckpointError as exc:
        raise dg.Failure(description=f"cleanup of {context.partition_key} refused: {exc}") from exc
    plan, result = cleaned.plan, cleaned.result
    failed = "\n".join(f"- `{o.path}`: {o.why}" for o in result.failed.sample[:25])
    if result.failed.files:
        context.log.error(f"{result.failed.files} deletions failed; see {audit.outcomes_url(plan)}")
    return dg.MaterializeResult(
        metadata={
            "applied": True,
            "deleted_files": result.deleted.files,
            "deleted_bytes": result.deleted.total_bytes,
            "skipped_files": result.skipped.files,
            "failed_files": result.failed.files,
            "replanned": cleaned.replanned is not None,
            "plan": dg.MetadataValue.path(plan.manifest),
            "reclaimed_by_reason": dg.MetadataValue.md(
                _totals_markdown(result.reclaimed_by_reason(), "reason")
            ),
            "failures": dg.MetadataValue.md(failed or "none"),
            "check": result.check.message,
            "outcomes": dg.MetadataValue.path(audit.outcomes_url(plan)),
        }
    )
