"""The names Dagster keeps in its records that more than one module reads: the maintenance jobs
(`orchestration/jobs.py` defines them by these names, the fleet report reads their failed runs)."""

COMPACTION_JOB = "compact_checkpoints"
CLEANUP_JOB = "checkpoint_cleanup"
MAINTENANCE_JOB = "checkpoint_maintenance"
