"""The `retire_checkpoints` job: retirement of dormant checkpoints, launched from the UI by a
person, never by a schedule or a sensor.

One launch plans (`plan`: the partitions to retire; each must be dormant), a later one applies
(`apply`: the plans, by partition and plan id, once the deployment's `retire_grace` has passed).
The person who launches the apply is the approval: who Dagster says launched it (the run's tags)
is recorded with each retirement. The op only translates: the archive must lie under a configured
root, and the checkpoint, the archive and the audit trail are the deployment's (run config
narrows, never widens). Discovery drops a retired checkpoint's partition at its next tick.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import functools
import time
from typing import Any

import dagster as dg
from pydantic import Field

from assets.resources import CheckpointRootsResource
from checkpoint.errors import CheckpointError
from checkpoint.policy import parse_duration
from checkpoint.retire import (
    RetirementPlanOptions,
    RetireOptions,
    apply_retirement,
    manifest_url,
    plan_retirement,
    read_retirement,
    retirement_request,
)
from checkpoint.safety import TakeLease

# Where Dagster records who launched a run: Dagster+ (`dagster/user`), or a tag the launcher sets.
_LAUNCHER_TAGS = ("dagster/user", "user", "launched_by")


class PlanRef(dg.Config):
    partition: str = Field(description="The retired checkpoint's partition key, e.g. prod:team-a/orders")
    plan_id: str = Field(description="The plan id the planning run named for it")


class RetireConfig(dg.Config):
    plan: list[str] = Field(
        default=[], description="Partition keys of dormant checkpoints to plan the retirement of"
    )
    archive_root: str | None = Field(
        default=None,
        description="Plan: a URL under a configured root; each checkpoint is archived at <archive_root>/<its "
        "path under its root>",
    )
    no_archive: bool = Field(default=False, description="Plan: retire without an archive (deleted for good)")
    apply: list[PlanRef] = Field(default=[], description="Plans to apply, once their grace has passed")


@dg.op(name="retire")
def retire_op(context: dg.OpExecutionContext, config: RetireConfig, roots: CheckpointRootsResource):
    """Plans, or applies plans; refuses the whole launch when it asks for both or neither."""
    if bool(config.plan) == bool(config.apply):
        raise dg.Failure(description="name the partitions to plan (`plan`) or the plans to apply (`apply`), "
                         "one of them")  # fmt: skip
    if config.plan and (config.archive_root is None) == (not config.no_archive):
        raise dg.Failure(description="name an archive_root, or say no_archive: nothing planned")
    done, refused = _plan(context, config, roots) if config.plan else _apply(context, config, roots)
    metadata: dict[str, Any] = {"done": len(done), "refused": len(refused),
                                "results": dg.MetadataValue.json(done)}  # fmt: skip
    if refused:
        raise dg.Failure(description=f"{len(refused)} refused: " + "; ".join(refused), metadata=metadata)
    return dg.Output(done, metadata=metadata)


def _take(context, roots: CheckpointRootsResource, key: str) -> TakeLease:
    """The leases a retirement's door takes for the checkpoint `key`, without a retry: the job
    reports a held one with the other refusals."""
    return lambda storage, what: roots.take_lease_at(context, storage, what, key, retry=False)


def _plan(context, config: RetireConfig, roots: CheckpointRootsResource) -> tuple[list[dict], list[str]]:
    done, refused, dormant = [], [], roots.policy().dormant_seconds
    for key in config.plan:
        try:
            site = roots.site(key)
            if not site.rel:
                raise CheckpointError("a root is never retired, only a checkpoint under it", key)
            archive = None
            if config.archive_root is not None:
                archive = roots.checkpoint_storage(
                    roots.under_a_root(f"{config.archive_root.rstrip('/')}/{site.rel}")
                )
            request = retirement_request(site.storage, archive, _take(context, roots, key), site.trail)
            options = RetirementPlanOptions(dormant_seconds=dormant, allow_short=roots.unsafe_floors)
            plan = plan_retirement(request, options)
        except CheckpointError as exc:
            refused.append(f"{key}: {exc}")
            continue
        context.log.info(f"{key}: retirement planned as {plan.plan_id} ({plan.files} files)")
        done.append({"partition": key, **plan.summary()})
    return done, refused


def _apply(context, config: RetireConfig, roots: CheckpointRootsResource) -> tuple[list[dict], list[str]]:
    tags = context.run.tags
    launcher = next((tags[t] for t in _LAUNCHER_TAGS if tags.get(t)), "a launcher Dagster does not name")
    options = functools.partial(RetireOptions, grace_seconds=parse_duration(roots.retire_grace),
                                allow_short_grace=roots.unsafe_floors,
                                approved_by=f"{launcher} (dagster run {context.run.run_id})")  # fmt: skip
    done, refused = [], []
    for ref in config.apply:
        try:
            site = roots.site(ref.partition)
            checkpoint, trail = site.storage, site.trail
            _, plan = read_retirement(manifest_url(trail, checkpoint.url, ref.plan_id), site.audit_options)
            archive = None
            if plan.archive is not None:  # the deployment's root and credentials, or refused
                archive = roots.checkpoint_storage(roots.under_a_root(plan.archive))
            request = retirement_request(checkpoint, archive, _take(context, roots, ref.partition), trail)
            retired = apply_retirement(request, options(plan, time.time()))
        except CheckpointError as exc:
            refused.append(f"{ref.partition} ({ref.plan_id}): {exc}")
            continue
        context.log.info(f"{ref.partition}: retired by plan {ref.plan_id}, approved by {launcher}")
        done.append({"partition": ref.partition, **retired.as_dict()})
    return done, refused
