"""Orphan cleanup as assets: plan -> blocking check -> apply (only when asked), per checkpoint.

The plan is a durable manifest in the audit trail; the apply asset deletes only when the run asks
for it (run config `apply: true`, or the run tag `ckpt/apply=true`): a run launched from the UI is
a dry run by default.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dataclasses
from typing import Any

import dagster as dg
from pydantic import Field

from assets import markdown
from assets.checkpoints import checkpoint_lineage_report
from assets.compaction import checkpoint_compaction
from assets.partitions import checkpoint_partitions
from assets.ranges import BATCHED, PER_CHECKPOINT, each_checkpoint, per_checkpoint, range_table, value_for
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import human_bytes
from checkpoint.cleanup import (
    CheckResult,
    Cleaned,
    CleanupOptions,
    GcPlanOptions,
    apply_cleanup,
    check_plan,
    plan_cleanup,
    plan_gc,
)
from checkpoint.errors import CheckpointError
from checkpoint.policy import parse_duration
from checkpoint.safety import InPlace, Plan

GROUP = "checkpoint_cleanup"
PLAN_CHECK = "plan_matches_commit_log"
APPLY_TAG = "ckpt/apply"
MANIFEST = "manifest"  # the plan asset's metadata entry that names its manifest
# ... and the one that pins its bytes: the apply checks the manifest against this record in
# Dagster's event log, never against anything the manifest says of itself.
MANIFEST_SHA256 = "manifest_sha256"
# The metadata keys the fleet report reads back (`assets.history`).
PLANNED_BYTES, APPLIED, DELETED_FILES, DELETED_BYTES = "bytes", "applied", "deleted_files", "deleted_bytes"


def _totals_markdown(totals: dict[str, dict[str, int]], what: str) -> str:
    if not totals:
        return f"No {what}."
    rows = [(k, v["files"], human_bytes(v["bytes"])) for k, v in totals.items()]
    return markdown.table((what, "files", "bytes"), rows)


def cleanup_of(
    roots: CheckpointRootsResource, request: InPlace, key: str, what: str, planned: Plan | None = None
) -> CleanupOptions:
    """The deployment's cleanup of the checkpoint `key` behind `request`: planned (a partition
    listed at a time) into the request's trail by the deployment's rules, the query taken as
    stopped where its root says its queries are."""
    rules = GcPlanOptions(
        grace_seconds=parse_duration(roots.grace),
        retain_batches=roots.retain_batches,
        quiet_seconds=parse_duration(roots.quiet_period),
        query_stopped=roots.site(key).root.queries_stopped,
    )
    return CleanupOptions(lambda: plan_gc(request, rules), planned=planned, what=what)


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    # The audit's blocking checks gate every change; planning after compaction (when both run)
    # keeps the plan from racing the new snapshot's files.
    deps=[checkpoint_lineage_report, checkpoint_compaction],
    backfill_policy=BATCHED,
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

    def plan_one(key: str) -> tuple[Plan, CheckResult, int]:
        request = roots.in_place(context, key, keeps_records=True)
        planned = plan_cleanup(request, cleanup_of(roots, request, key, "checkpoint_orphan_plan"))
        return planned.plan, check_plan(planned.plan, request.storage), planned.pruned

    done = each_checkpoint(context.partition_keys, plan_one, failing="was not planned")
    stale = {key: verdict.message for key, (_, verdict, _) in done.items() if not verdict.ok}
    (first_plan, first_verdict, pruned), *_ = done.values()
    check = dg.AssetCheckResult(
        check_name=PLAN_CHECK,
        passed=not stale,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"verdict": first_verdict.message, "newest_commit": first_verdict.newest_commit}
        if len(done) == 1
        else {
            "stale": dg.MetadataValue.md(markdown.table(("checkpoint", "verdict"), stale.items()) or "none")
        },
    )
    if len(done) > 1:
        rows = {key: (p.files, human_bytes(p.total_bytes), p.against_batch, "ok" if v.ok else v.message)
                for key, (p, v, _) in done.items()}  # fmt: skip
        metadata: dict[str, Any] = {
            "checkpoints": len(done),
            "files": sum(p.files for p, _, _ in done.values()),
            PLANNED_BYTES: sum(p.total_bytes for p, _, _ in done.values()),
            "checkpoints_table": range_table(("files", "size", "against batch", "verdict"), rows),
            # Each checkpoint's manifest and the digest the apply holds it to, in Dagster's event log.
            PER_CHECKPOINT: per_checkpoint(
                {
                    k: {
                        MANIFEST: p.manifest,
                        MANIFEST_SHA256: p.digest,
                        "files": p.files,
                        PLANNED_BYTES: p.total_bytes,
                    }
                    for k, (p, _, _) in done.items()
                }
            ),
        }
        return dg.MaterializeResult(metadata=metadata, check_results=[check])
    plan = first_plan
    return dg.MaterializeResult(
        metadata={
            "files": plan.files,
            PLANNED_BYTES: plan.total_bytes,
            "size": human_bytes(plan.total_bytes),
            "against_batch": plan.against_batch,
            "live_query": plan.live,
            "retained_files": plan.retained_files,
            MANIFEST: dg.MetadataValue.path(plan.manifest),
            MANIFEST_SHA256: plan.digest,
            "by_reason": dg.MetadataValue.md(_totals_markdown(plan.by_reason, "reason")),
            "by_store": dg.MetadataValue.md(_totals_markdown(plan.by_store, "store")),
            "not_yet": ", ".join(f"{n} {why}" for why, n in plan.kept.items()) or "none",
            "audit_plans_removed": pruned,
        },
        check_results=[check],
    )


class CleanupConfig(dg.Config):
    apply: bool = Field(default=False, description="Delete the planned files; false: a dry run")


def _latest_plan(context: dg.AssetExecutionContext, roots: CheckpointRootsResource, key: str) -> Plan:
    """The plan the plan asset last wrote for `key` (alone, or in a range): its header, read from
    the manifest, held to the digest Dagster recorded."""
    found = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=checkpoint_orphan_plan.key, asset_partitions=[key]), limit=1
    ).records
    metadata = found[0].asset_materialization.metadata if found else {}
    manifest, digest = value_for(metadata, key, MANIFEST), value_for(metadata, key, MANIFEST_SHA256)
    if manifest is None:
        raise CheckpointError(f"{key}: no cleanup plan yet (materialize the plan)")
    plan = roots.audit_trail(key).read_plan(str(manifest))
    # No digest recorded (a plan made before digests were): the apply refuses it, plan again.
    return dataclasses.replace(plan, digest=str(digest) if digest is not None else "")


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    deps=[checkpoint_orphan_plan],
    backfill_policy=BATCHED,
)
def checkpoint_orphan_cleanup(
    context: dg.AssetExecutionContext, config: CleanupConfig, roots: CheckpointRootsResource
):
    """Deletes the plan's files when asked; every outcome goes to the audit trail."""
    keys = context.partition_keys
    plans = each_checkpoint(
        keys, lambda key: _latest_plan(context, roots, key), failing="has no plan to apply"
    )
    apply = config.apply or context.run.tags.get(APPLY_TAG, "").lower() == "true"
    if not apply:
        return dg.MaterializeResult(
            metadata={
                APPLIED: False,
                "would_delete_files": sum(p.files for p in plans.values()),
                "would_delete_bytes": sum(p.total_bytes for p in plans.values()),
                "note": "dry run: launch with run config `apply: true` or the tag ckpt/apply=true to delete",
            }
        )

    def apply_one(key: str) -> Cleaned:
        # The plan step ran before this lease was taken: planned again under it when the query ran since.
        request = roots.in_place(context, key, retry=len(keys) == 1, keeps_records=True)
        return apply_cleanup(
            request, cleanup_of(roots, request, key, "checkpoint_orphan_cleanup", plans[key])
        )

    done = each_checkpoint(keys, apply_one, failing="was not cleaned")
    for key, cleaned in done.items():
        if cleaned.result.failed.files:
            where = roots.audit_trail(key).outcomes_url(cleaned.plan)
            context.log.error(f"{key}: {cleaned.result.failed.files} deletions failed; see {where}")
    if len(done) > 1:
        rows = {key: (c.result.deleted.files, human_bytes(c.result.deleted.total_bytes),
                      c.result.failed.files, c.replanned is not None) for key, c in done.items()}  # fmt: skip
        return dg.MaterializeResult(
            metadata={
                APPLIED: True,
                DELETED_FILES: sum(c.result.deleted.files for c in done.values()),
                DELETED_BYTES: sum(c.result.deleted.total_bytes for c in done.values()),
                "failed_files": sum(c.result.failed.files for c in done.values()),
                "checkpoints_table": range_table(("deleted", "size", "failed", "replanned"), rows),
                PER_CHECKPOINT: per_checkpoint(
                    {
                        k: {
                            APPLIED: True,
                            DELETED_FILES: c.result.deleted.files,
                            DELETED_BYTES: c.result.deleted.total_bytes,
                        }
                        for k, c in done.items()
                    }
                ),
            }
        )
    ((key, cleaned),) = done.items()
    plan, result = cleaned.plan, cleaned.result
    audit = roots.audit_trail(key)
    failed = "\n".join(f"- `{o.path}`: {o.why}" for o in result.failed.sample[:25])
    return dg.MaterializeResult(
        metadata={
            APPLIED: True,
            DELETED_FILES: result.deleted.files,
            DELETED_BYTES: result.deleted.total_bytes,
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
