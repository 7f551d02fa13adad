"""The read-only audit on a schedule: every known checkpoint in batched validation runs (500 a
run: 20 runs for 10,000), and the fleet report."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg

from assets.partitions import CHECKPOINTS
from checkpoint.policy import POLICY
from orchestration.jobs import fleet_job, validate_checkpoints_job
from orchestration.maintenance import batched
from orchestration.validation import validation_request

AUDIT_CRON = POLICY.audit_cron


@dg.schedule(
    job=validate_checkpoints_job, cron_schedule=AUDIT_CRON, default_status=dg.DefaultScheduleStatus.STOPPED
)
def checkpoint_audit_schedule(context: dg.ScheduleEvaluationContext):
    """Every known checkpoint, four times a day, `validation_run_max_checkpoints` a run; run keys
    make a re-evaluated tick a no-op."""
    tick = context.scheduled_execution_time.isoformat()
    keys = sorted(context.instance.get_dynamic_partitions(CHECKPOINTS))
    if not keys:
        return dg.SkipReason("no checkpoints discovered yet (the discovery sensor adds them)")
    size = max(1, POLICY.validation_run_max_checkpoints)
    runs = [validation_request(run, f"audit:{tick}", bulk=True) for run in batched(keys, size)]
    context.log.info(f"{len(keys)} checkpoint(s) in {len(runs)} validation run(s) of {size} at most")
    return runs


# On the audit's cron (a schedule runs one job): the fleet report over every checkpoint.
checkpoint_fleet_schedule = dg.ScheduleDefinition(
    name="checkpoint_fleet_schedule",
    job=fleet_job,
    cron_schedule=AUDIT_CRON,
    default_status=dg.DefaultScheduleStatus.STOPPED,
)
