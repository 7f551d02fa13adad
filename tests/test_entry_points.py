"""Every entry point above the core, the CLI and Dagster's resources, takes its defaults from the
one policy object (the core's own: tests/checkpoint/test_policy.py)."""

from __future__ import annotations

from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
from checkpoint.policy import POLICY, parse_duration
from cli.main import build_parser


def test_the_cli_and_dagster_take_their_defaults_from_the_policy() -> None:
    cli = build_parser()
    assert cli.parse_args(["validate", "x"]).long_chain == POLICY.long_chain
    assert cli.parse_args(["scan", "x"]).long_chain == POLICY.long_chain
    assert cli.parse_args(["compact", "x"]).min_chain == POLICY.long_chain
    gc = cli.parse_args(["gc", "x"])
    assert (gc.grace, gc.quiet_period) == (POLICY.grace_seconds, POLICY.quiet_seconds)
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="r", url="/nowhere")])
    assert roots.long_chain_threshold == POLICY.long_chain
    assert parse_duration(roots.grace) == POLICY.grace_seconds
    assert parse_duration(roots.quiet_period) == POLICY.quiet_seconds
    assert parse_duration(roots.lease_wait) == POLICY.lease_wait_seconds
    assert roots.lease_retries == POLICY.lease_retries
    assert gc.batch_size == POLICY.delete_batch_size
    assert cli.parse_args(["compact", "x"]).master == POLICY.spark_master == SparkResource().master
    assert cli.parse_args(["fork", "x", "y"]).workers == POLICY.fork_workers
    assert cli.parse_args(["gc", "x"]).lease_ttl == POLICY.lease_ttl_seconds
