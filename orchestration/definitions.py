"""The deployed Dagster code location (workspace.yaml), configured by the environment only:
CKPT_ROOTS (a JSON list of roots; required), CKPT_SPARK_MASTER (default: the policy's
spark_master), CKPT_REHEARSAL_QUERIES (the queries a rehearsal may run; default none) and
CKPT_TARGET_SPARK (the Spark the fleet view's upgrade readiness is for; default none). Nothing of it
can be set by a run's config."""

from __future__ import annotations

import os

from assets.resources import SparkResource, roots_from_env
from checkpoint.analysis import spark_line
from checkpoint.policy import POLICY
from orchestration.location import build_definitions
from orchestration.rehearsal import queries_from_env

defs = build_definitions(
    roots_from_env(),
    SparkResource(master=os.environ.get("CKPT_SPARK_MASTER", POLICY.spark_master)),
    queries_from_env(),
    # Checked here: a version the rules do not cover stops the code location from loading.
    target_spark=spark_line(target) if (target := os.environ.get("CKPT_TARGET_SPARK")) else None,
)
