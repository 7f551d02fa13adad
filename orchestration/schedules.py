"""The read-only audit: a partitioned job (backfill any selection from the UI) and its schedule."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg

from assets.partitions import CHECKPOINTS
from checkpoint.policy import POLICY
from orchestration.jobs import audit_job, fleet_job

AUDIT_CRON = POLICY.audit_cron


@dg.schedule(job=audit_job, cron_schedule=AUDIT_CRON, default_status=dg.DefaultScheduleStatus.STOPPED)
def checkpoint_audit_schedule(context: dg.ScheduleEvaluationContext):
    """Every known checkpoint, four times a day; run keys make a re-evaluated tick a no-op."""
    tick = context.scheduled_execution_time.isoformat()
    keys = context.instance.get_dynamic_partitions(CHECKPOINTS)
    if not keys:
        return dg.SkipReason("no checkpoints discovered yet (the discovery sensor adds them)")
    return [dg.RunRequest(run_key=f"audit:{key}:{tick}", partition_key=key) for key in keys]


# On the audit's cron (a schedule runs one job): the fleet report over every checkpoint.
checkpoint_fleet_schedule = dg.ScheduleDefinition(
    name="checkpoint_fleet_schedule",
    job=fleet_job,
    cron_schedule=AUDIT_CRON,
    default_status=dg.DefaultScheduleStatus.STOPPED,
)
