"""The Dagster code location: audit, compaction and cleanup assets with their checks, the jobs, a
maintenance schedule per root, and the discovery and commit sensors."""

from __future__ import annotations

import os

import dagster as dg

import assets
from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource, roots_from_env
from checkpoint.policy import POLICY
from orchestration.jobs import ALL_JOBS
from orchestration.maintenance import maintenance_schedule
from orchestration.schedules import checkpoint_audit_schedule, checkpoint_fleet_schedule
from orchestration.sensors import checkpoint_commit_sensor, checkpoint_discovery_sensor


def build_definitions(roots: list[CheckpointRoot], spark: SparkResource | None = None, **roots_options):
    return dg.Definitions(
        assets=dg.load_assets_from_package_module(assets),
        jobs=ALL_JOBS,
        schedules=[
            checkpoint_audit_schedule,
            checkpoint_fleet_schedule,
            *(maintenance_schedule(root) for root in roots),
        ],
        sensors=[checkpoint_discovery_sensor, checkpoint_commit_sensor],
        resources={
            "roots": CheckpointRootsResource(roots=roots, **roots_options),
            "spark": spark or SparkResource(),
        },
    )


# The environment configures the deployed code location: CKPT_ROOTS (JSON list of roots) and
# CKPT_SPARK_MASTER (default: the policy's spark_master).
defs = build_definitions(
    roots_from_env(), SparkResource(master=os.environ.get("CKPT_SPARK_MASTER", POLICY.spark_master))
)
