"""The Dagster code location: audit assets and checks, the audit job, its schedule, discovery."""

from __future__ import annotations

import dagster as dg

import assets
from orchestration.resources import CheckpointRoot, CheckpointRootsResource, SparkResource, roots_from_env
from orchestration.schedules import audit_job, checkpoint_audit_schedule
from orchestration.sensors import checkpoint_discovery_sensor


def build_definitions(roots: list[CheckpointRoot], long_chain_threshold: int = 10) -> dg.Definitions:
    return dg.Definitions(
        assets=dg.load_assets_from_package_module(assets),
        jobs=[audit_job],
        schedules=[checkpoint_audit_schedule],
        sensors=[checkpoint_discovery_sensor],
        resources={
            "roots": CheckpointRootsResource(roots=roots, long_chain_threshold=long_chain_threshold),
            "spark": SparkResource(),
        },
    )


defs = build_definitions(roots_from_env())
