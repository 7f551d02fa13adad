"""The Dagster code location's contents for given roots: audit, compaction and cleanup assets with
their checks, the jobs, a maintenance schedule per root, and the discovery and commit sensors.
The deployed location (`orchestration.definitions`) builds it from the environment."""

from __future__ import annotations

import dagster as dg

import assets
from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource, fixed
from orchestration.jobs import ALL_JOBS
from orchestration.maintenance import maintenance_schedule
from orchestration.rehearsal import RegisteredQuery, rehearsal_job
from orchestration.schedules import checkpoint_audit_schedule, checkpoint_fleet_schedule
from orchestration.sensors import checkpoint_commit_sensor, checkpoint_discovery_sensor


def build_definitions(
    roots: list[CheckpointRoot],
    spark: SparkResource | None = None,
    queries: dict[str, RegisteredQuery] | None = None,
    **roots_options,
):
    """`queries`: the registry of the rehearsal job (`orchestration.rehearsal`); none, no such job."""
    rehearsal = rehearsal_job(queries or {})
    return dg.Definitions(
        assets=dg.load_assets_from_package_module(assets),
        jobs=[*ALL_JOBS, *([rehearsal] if rehearsal else [])],
        schedules=[
            checkpoint_audit_schedule,
            checkpoint_fleet_schedule,
            *(maintenance_schedule(root) for root in roots),
        ],
        sensors=[checkpoint_discovery_sensor, checkpoint_commit_sensor],
        # A run's steps in the run's own process. Each step of Dagster's default executor is a
        # new interpreter that imports Dagster and this package first (about 2 CPU-seconds), and a
        # maintenance run has six; its steps run one after another anyway (audit, then compaction,
        # then the cleanup plan). Pools are still enforced per step.
        executor=dg.in_process_executor,
        resources={
            # Fixed: no run's config reaches what maintenance may touch, the floors it keeps, or
            # the Spark that reads and writes the state.
            "roots": fixed(CheckpointRootsResource(roots=roots, **roots_options)),
            "spark": fixed(spark or SparkResource()),
        },
    )
