"""Orphan cleanup as assets: plan -> blocking check -> apply (only when asked), per checkpoint.

The plan is a durable manifest in the audit trail; the apply asset deletes only when the run asks
for it (run config `apply: true`, or the run tag `ckpt/apply=true`): a run launched from the UI is
a dry run by default.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg
from pydantic import Field

from assets import markdown
from assets.checkpoints import checkpoint_lineage_report
from assets.compaction import checkpoint_compaction
from assets.partitions import checkpoint_partitions
from assets.resources import CheckpointRootsResource
from checkpoint.errors import CheckpointError
from checkpoint.gc_apply import Outcome, apply_plan, check_plan
from checkpoint.gc_plan import Plan, plan_gc
from checkpoint.policy import parse_duration
from checkpoint.report import human_bytes

GROUP = "checkpoint_cleanup"
PLAN_CHECK = "plan_matches_commit_log"
APPLY_TAG = "ckpt/apply"
REPLANNED = "no longer an orphan when planned again under the lease"


def _totals_markdown(totals: dict[str, dict[str, int]], what: str) -> str:
    if not totals:
        return f"No {what}."
    rows = [(k, v["files"], human_bytes(v["bytes"])) for k, v in totals.items()]
    return markdown.table((what, "files", "bytes"), rows)


def _plan(roots: CheckpointRootsResource, key: str) -> Plan:
    ckpt = roots.load_listed(key)  # strict: fail closed
    return plan_gc(
        ckpt,
        grace_seconds=parse_duration(roots.grace),
        retain_batches=roots.retain_batches,
        quiet_seconds=parse_duration(roots.quiet_period),
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
    """Files no batch will ever read again, with the reason for each, written to the audit trail."""
    try:
        plan = _plan(roots, context.partition_key)
    except CheckpointError as exc:
        raise dg.Failure(description=f"no plan for {context.partition_key}: {exc}") from exc
    manifest = roots.audit_trail(context.partition_key).write_plan(plan)
    yield dg.Output(
        plan,
        metadata={
            "files": plan.files,
            "bytes": plan.bytes,
            "size": human_bytes(plan.bytes),
            "against_batch": plan.against_batch,
            "live_query": plan.live,
            "retained_files": plan.retained_files,
            "manifest": dg.MetadataValue.path(manifest),
            "by_reason": dg.MetadataValue.md(_totals_markdown(plan.totals("reason"), "reason")),
            "by_store": dg.MetadataValue.md(_totals_markdown(plan.totals("store"), "store")),
            "not_yet": ", ".join(f"{n} {why}" for why, n in plan.kept.items()) or "none",
        },
    )
    verdict = check_plan(plan, roots.checkpoint_storage(context.partition_key))
    yield dg.AssetCheckResult(
        check_name=PLAN_CHECK,
        passed=verdict.ok,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"verdict": verdict.message, "newest_commit": verdict.newest_commit},
    )


class CleanupConfig(dg.Config):
    apply: bool = Field(default=False, description="Delete the planned files; false: a dry run")


@dg.asset(partitions_def=checkpoint_partitions, group_name=GROUP)
def checkpoint_orphan_cleanup(
    context: dg.AssetExecutionContext,
    config: CleanupConfig,
    roots: CheckpointRootsResource,
    checkpoint_orphan_plan: Plan,
):
    """Deletes the plan's files when asked; every outcome goes to the audit trail."""
    plan = checkpoint_orphan_plan
    apply = config.apply or context.run.tags.get(APPLY_TAG, "").lower() == "true"
    if not apply:
        return dg.MaterializeResult(
            metadata={
                "applied": False,
                "would_delete_files": plan.files,
                "would_delete_bytes": plan.bytes,
                "note": "dry run: launch with run config `apply: true` or the tag ckpt/apply=true to delete",
            }
        )
    audit = roots.audit_trail(context.partition_key)
    with roots.take_lease(context, context.partition_key, "checkpoint_orphan_cleanup") as lease:
        try:
            # The plan step ran before this lease was taken: plan again under it, and delete only
            # what both plans name (safety.md: a plan is made under the lease).
            plan, dropped = plan.confirmed_by(_plan(roots, context.partition_key))
            replanned = [Outcome(c.path, c.bytes, c.reason, "skipped", REPLANNED) for c in dropped]
            if replanned:
                context.log.info(f"{len(replanned)} planned files are no longer orphans when planned again")
                audit.record(plan, replanned)
            result = apply_plan(plan, roots.checkpoint_storage(context.partition_key), audit, lease=lease)
        except CheckpointError as exc:
            raise dg.Failure(description=f"cleanup of {context.partition_key} refused: {exc}") from exc
    result.skipped.extend(replanned)
    failed = "\n".join(f"- `{o.path}`: {o.why}" for o in result.failed[:25])
    if result.failed:
        context.log.error(f"{len(result.failed)} deletions failed; see {audit.outcomes_url(plan)}")
    return dg.MaterializeResult(
        metadata={
            "applied": True,
            "deleted_files": len(result.deleted),
            "deleted_bytes": sum(o.bytes for o in result.deleted),
            "skipped_files": len(result.skipped),
            "failed_files": len(result.failed),
            "reclaimed_by_reason": dg.MetadataValue.md(
                _totals_markdown(result.reclaimed_by_reason(), "reason")
            ),
            "failures": dg.MetadataValue.md(failed or "none"),
            "check": result.check.message,
            "outcomes": dg.MetadataValue.path(audit.outcomes_url(plan)),
        }
    )
