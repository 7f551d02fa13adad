"""Maintenance in batches: one run validates, compacts and cleans many checkpoints, in one Spark
application, and a schedule per configured root asks for ceil(checkpoints / batch) such runs.

A run's steps, each over its whole batch:
1. validation, head-first, materializing each checkpoint's audit partitions (orchestration/validation.py);
2. compaction of every due store of the checkpoints that validated clean, as the jobs of one Spark
   application (the compaction asset's flow: each checkpoint's lease held until its stores are done);
3. cleanup of each of them: planned into its audit trail, and applied under its lease only under
   roots with `apply_cleanup` (a run's config can switch a step off, never on where the root says no).
A checkpoint that fails a step is not taken further and holds back no other; the run fails at the
end naming every one that failed, in a table and a CSV. The commit sensor asks for the same run
with cleanup off for the checkpoints whose compaction is due.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import hashlib
from collections.abc import Sequence
from typing import Any

import dagster as dg
from pydantic import Field

from assets.cleanup import (
    APPLIED,
    DELETED_BYTES,
    DELETED_FILES,
    MANIFEST,
    MANIFEST_SHA256,
    PLANNED_BYTES,
    checkpoint_orphan_cleanup,
    checkpoint_orphan_plan,
    cleanup_of,
)
from assets.compaction import STORES_COMPACTED, checkpoint_compaction, spark_rebuild
from assets.partitions import CHECKPOINTS, root_of
from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
from checkpoint.cleanup import apply_cleanup, plan_cleanup
from checkpoint.compaction import CompactionOptions, compact_checkpoints
from checkpoint.errors import CheckpointError
from checkpoint.policy import POLICY
from checkpoint.safety import EachInPlace
from orchestration.queue import Kind, run_tags
from orchestration.validation import Outcomes, validate_keys

BATCH = POLICY.maintenance_run_max_checkpoints
JOB = "maintain_checkpoints"  # orchestration/jobs.py defines it


class MaintainConfig(dg.Config):
    partitions: list[str] = Field(description="Partition keys of the checkpoints to maintain")
    compact: bool = Field(default=True, description="Compact the stores whose replay chain is due")
    clean: bool = Field(default=True, description="Plan orphan cleanup (applied only under roots that apply)")


def _compact(context, roots, spark, keys: Sequence[str], done: Outcomes) -> None:
    request = EachInPlace(keys, lambda key: roots.in_place(context, key, retry=False))
    options = CompactionOptions(spark_rebuild(context, spark), roots.compaction_plan_options(), strict=True,
                                go_on=True, what="maintain_checkpoints")  # fmt: skip
    compaction = compact_checkpoints(request, options)
    for refusal in compaction.refused:
        done.fail(refusal.name, f"compaction refused: {refusal.why}")
    names = {p.ckpt.url: p.name for p in compaction.planned}
    before: dict[str, list[int]] = {name: [] for name in names.values()}
    for outcome in compaction.outcomes:
        if outcome.ok:
            before[names[outcome.url]].append(outcome.chain_before)
        else:
            done.fail(names[outcome.url], f"compaction of {outcome.store.label} failed: {outcome.error}")
    for planned in compaction.planned:
        key, chains = planned.name, before[planned.name]
        done.rows[key][-1] = len(chains)
        if chains and key not in done.failed:
            after = compaction.chains_after.get(key, {})
            metadata: dict[str, Any] = {STORES_COMPACTED: len(chains), "max_chain_before": max(chains),
                        "max_chain_after": max(after.values(), default=0)}  # fmt: skip
            context.log_event(
                dg.AssetMaterialization(checkpoint_compaction.key, partition=key, metadata=metadata)
            )


def _clean(context, roots: CheckpointRootsResource, key: str, applies: bool) -> str:
    """Plans (and where the root applies, deletes under the lease); returns what it did."""
    request = roots.in_place(context, key, retry=False, keeps_records=True)
    audit = request.audit_trail()
    options = cleanup_of(roots, request, key, "maintain_checkpoints")
    if applies:
        cleaned = apply_cleanup(request, options)
        plan, result = cleaned.plan, cleaned.result
        if result.failed.files:
            raise CheckpointError(f"{result.failed.files} deletion(s) failed: see {audit.outcomes_url(plan)}")
        metadata: dict[str, Any] = {
            APPLIED: True,
            DELETED_FILES: result.deleted.files,
            DELETED_BYTES: result.deleted.total_bytes,
            "plan": dg.MetadataValue.path(plan.manifest),
        }
        context.log_event(
            dg.AssetMaterialization(checkpoint_orphan_cleanup.key, partition=key, metadata=metadata)
        )
        outcome = f"deleted {result.deleted.files}"
    else:
        plan = plan_cleanup(request, options).plan
        outcome = f"planned {plan.files}"
    metadata = {
        "files": plan.files,
        PLANNED_BYTES: plan.total_bytes,
        MANIFEST: dg.MetadataValue.path(plan.manifest),
        MANIFEST_SHA256: plan.digest,
        "against_batch": plan.against_batch,
    }
    context.log_event(dg.AssetMaterialization(checkpoint_orphan_plan.key, partition=key, metadata=metadata))
    return outcome


@dg.op(tags={"kind": "maintenance"})
def maintain_each(
    context: dg.OpExecutionContext,
    config: MaintainConfig,
    roots: CheckpointRootsResource,
    spark: SparkResource,
):
    """Validation, compaction and cleanup of each checkpoint named in the config, in one Spark application."""
    done = validate_keys(context, roots, config.partitions)
    healthy = [key for key in config.partitions if key not in done.failed]
    if config.compact:
        done.columns += ("stores compacted",)
        for key in config.partitions:
            done.rows[key].append("-")
        _compact(context, roots, spark, healthy, done)
    if config.clean:
        done.columns += ("cleanup",)
        for key in config.partitions:
            if key in done.failed:
                done.rows[key].append("-")
                continue
            try:
                applies = roots.site(key).root.apply_cleanup
                done.rows[key].append(_clean(context, roots, key, applies))
            except (CheckpointError, ValueError) as exc:
                done.rows[key].append("failed")
                done.fail(key, f"cleanup: {exc}")
    context.add_output_metadata(done.report(context, roots, "maintenance"))


def batched(keys: Sequence[str], size: int = BATCH) -> list[list[str]]:
    """`keys` in runs of `size`, in order."""
    return [list(keys[i : i + size]) for i in range(0, len(keys), max(1, size))]


def maintenance_request(keys: Sequence[str], why: str, kind: Kind, **config) -> dg.RunRequest:
    """One run of `maintain_checkpoints` for `keys`; its run key names them, so a repeated tick
    asks for it once."""
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
    run_config = {"ops": {"maintain_each": {"config": {"partitions": list(keys), **config}}}}
    tags = {**run_tags(kind), "ckpt/checkpoints": str(len(keys))}
    return dg.RunRequest(job_name=JOB, run_config=run_config, run_key=f"{why}:{digest}", tags=tags)


def maintenance_requests(root: CheckpointRoot, keys: Sequence[str], tick: str) -> list[dg.RunRequest]:
    mine = sorted(key for key in keys if root_of(key) == root.name)
    return [
        maintenance_request(batch, f"maintenance:{root.name}:{tick}", Kind.MAINTENANCE)
        for batch in batched(mine)
    ]


def maintenance_schedule(root: CheckpointRoot) -> dg.ScheduleDefinition:
    """Every checkpoint under one root, on that root's cron, in runs of `BATCH`; run keys make a
    re-run tick a no-op."""

    def evaluate(context: dg.ScheduleEvaluationContext):
        keys = context.instance.get_dynamic_partitions(CHECKPOINTS)
        requests = maintenance_requests(root, keys, context.scheduled_execution_time.isoformat())
        if not requests:
            yield dg.SkipReason(f"no checkpoints discovered under root {root.name!r} yet")
            return
        mine = sum(int(r.tags["ckpt/checkpoints"]) for r in requests)
        context.log.info(
            f"{mine} checkpoint(s) under {root.name!r} in {len(requests)} run(s) of {BATCH} at most"
        )
        yield from requests  # an `execution_fn` yields: a list it returns fails the evaluation

    return dg.ScheduleDefinition(
        name=f"maintenance_{root.name.replace('-', '_')}",
        job_name=JOB,
        cron_schedule=root.maintenance_cron,
        execution_fn=evaluate,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Maintenance of every checkpoint under {root.url}, {BATCH} a run"
        + (" (cleanup applies)" if root.apply_cleanup else " (cleanup only plans)"),
    )
