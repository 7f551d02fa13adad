"""The maintenance pass: audit, compaction and cleanup of a checkpoint in one run, and a schedule
per configured root (cleanup deletes only under roots with `apply_cleanup`)."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
from collections.abc import Sequence

import dagster as dg

from assets.cleanup import APPLY_TAG
from assets.partitions import CHECKPOINTS, parse_partition_key
from assets.resources import CheckpointRoot
from orchestration.jobs import maintenance_job


def maintenance_requests(root: CheckpointRoot, keys: Sequence[str], tick: str) -> list[dg.RunRequest]:
    return [
        dg.RunRequest(
            run_key=f"maintenance:{key}:{tick}",
            partition_key=key,
            tags={APPLY_TAG: str(root.apply_cleanup).lower(), "ckpt/root": root.name},
        )
        for key in keys
        if parse_partition_key(key)[0] == root.name
    ]


def maintenance_schedule(root: CheckpointRoot) -> dg.ScheduleDefinition:
    """Every checkpoint under one root, on that root's cron; run keys make a re-run tick a no-op."""

    def evaluate(context: dg.ScheduleEvaluationContext):
        keys = context.instance.get_dynamic_partitions(CHECKPOINTS)
        requests = maintenance_requests(root, keys, context.scheduled_execution_time.isoformat())
        if not requests:
            yield dg.SkipReason(f"no checkpoints discovered under root {root.name!r} yet")
        yield from requests

    return dg.ScheduleDefinition(
        name=f"maintenance_{root.name.replace('-', '_')}",
        job=maintenance_job,
        cron_schedule=root.maintenance_cron,
        execution_fn=evaluate,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Maintenance of every checkpoint under {root.url}"
        + (" (cleanup applies)" if root.apply_cleanup else " (cleanup only plans)"),
    )
