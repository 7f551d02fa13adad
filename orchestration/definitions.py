"""The Dagster code location: audit and cleanup assets with their checks, jobs, schedules, discovery."""

from __future__ import annotations

import dagster as dg

import assets
from assets.cleanup import checkpoint_cleanup_schedule, cleanup_job
from orchestration.resources import CheckpointRoot, CheckpointRootsResource, SparkResource, roots_from_env
from orchestration.schedules import audit_job, checkpoint_audit_schedule
from orchestration.sensors import checkpoint_discovery_sensor


def build_definitions(roots: list[CheckpointRoot], **roots_options) -> dg.Definitions:
    return dg.Definitions(
        assets=dg.load_assets_from_package_module(assets),
        jobs=[audit_job, cleanup_job],
        schedules=[checkpoint_audit_schedule, checkpoint_cleanup_schedule],
        sensors=[checkpoint_discovery_sensor],
        resources={"roots": CheckpointRootsResource(roots=roots, **roots_options), "spark": SparkResource()},
    )


defs = build_definitions(roots_from_env())
