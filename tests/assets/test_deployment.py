"""The deployment's configuration: a credential in any shape refused and never printed, the
floors a deployment keeps, roots required, and the schedules' batched runs at 10,000 checkpoints."""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import pytest

from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
from orchestration.location import build_definitions
from tests.support.runs import batches_of

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def _root_with(**options) -> CheckpointRoot:
    return CheckpointRoot(name="t", url="s3://b/x", storage_options=options)


@pytest.mark.parametrize(
    "resource",
    [
        lambda: SparkResource(conf={"spark.hadoop.fs.s3a.secret.key": SECRET}),
        lambda: SparkResource(conf={"spark.hadoop.fs.s3a.access.key": SECRET}),
        lambda: SparkResource(remote=f"sc://host:443/;token={SECRET}"),
        lambda: _root_with(client_kwargs={"x": [{"aws_secret_access_key": SECRET}]}),
        lambda: _root_with(headers={"Authorization": SECRET}),
        lambda: _root_with(headers={"Cookie": SECRET}),
        lambda: _root_with(client_kwargs={"endpoint_url": f"http://admin:{SECRET}@h:9000"}),
        lambda: CheckpointRoot(name="t", url=f"s3://admin:{SECRET}@b/x"),
        lambda: _root_with(s3_additional_kwargs={"SSECustomerKey": SECRET}),
        lambda: _root_with(passphrase=SECRET),
        lambda: _root_with(api_key=SECRET),
        lambda: CheckpointRootsResource(roots=[CheckpointRoot(name="t", url="/x")], audit_url=f"s3://u:{SECRET}@b/a"),
    ],
)  # fmt: skip
def test_a_credential_in_any_shape_is_refused_and_never_printed(resource) -> None:
    with pytest.raises(Exception) as refused:
        resource()
    assert (
        "credential" in str(refused.value)
        or "user or password" in str(refused.value)
        or "token" in str(refused.value)
    )
    assert SECRET not in str(refused.value) and SECRET not in repr(refused.value)


def test_a_url_with_a_password_is_refused_by_every_command_and_never_printed(tmp_path) -> None:
    from tests.support.cli import ckpt

    for args in (["validate", f"s3://admin:{SECRET}@bucket/ckpt"], ["scan", f"s3://admin:{SECRET}@bucket"],
                 ["fork", str(tmp_path), f"s3://admin:{SECRET}@bucket/dest"]):  # fmt: skip
        out = ckpt(*args)
        assert out.returncode == 2 and "user or password" in out.stderr, (args, out.stderr)
        assert SECRET not in out.stderr + out.stdout and "Traceback" not in out.stderr


def test_the_deployment_keeps_the_floors_and_a_run_only_narrows(tmp_path) -> None:
    root = CheckpointRoot(name="t", url=str(tmp_path))
    for setting in ({"grace": "1m"}, {"quiet_period": "0s"}):
        with pytest.raises(Exception, match="below the floor"):
            CheckpointRootsResource(roots=[root], **setting)
    assert CheckpointRootsResource(roots=[root], quiet_period="0s", unsafe_floors=True)
    roots = CheckpointRootsResource(roots=[root], quiet_period="2h")
    assert roots.quiet_seconds_at_least("0s") == roots.quiet_seconds_at_least(None) == 7200
    assert roots.quiet_seconds_at_least("3h") == 3 * 3600


def test_a_deployment_without_roots_refuses_to_load() -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CKPT_ROOTS"}
    loaded = subprocess.run([sys.executable, "-c", "import orchestration.definitions"], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert loaded.returncode != 0 and "CKPT_ROOTS is not set" in loaded.stderr


def test_the_schedules_ask_for_batched_runs_that_apply_only_where_configured() -> None:
    from orchestration.maintenance import BATCH, maintenance_requests

    prod = CheckpointRoot(name="prod", url="/prod", apply_cleanup=True)
    audit_only = CheckpointRoot(name="audit-only", url="/other", maintenance_cron="0 5 * * 0")
    defs = build_definitions([prod, audit_only])
    schedules = {s.name: s for s in defs.schedules}
    assert schedules["maintenance_prod"].cron_schedule == "30 3 * * *"
    assert schedules["maintenance_audit_only"].cron_schedule == "0 5 * * 0"
    assert {s.job_name for n, s in schedules.items() if n.startswith("maintenance_")} == {
        "maintain_checkpoints"
    }
    keys = [f"prod:q{i:05d}" for i in range(10_000)] + ["audit-only:b"]
    tick = datetime(2026, 11, 21, 3, 30).isoformat()
    runs = maintenance_requests(prod, keys, tick)
    assert len(runs) == 10_000 // BATCH <= 100  # the bound at 10,000
    assert sorted(k for run in batches_of(runs, "maintenance") for k in run) == keys[:-1]
    assert batches_of(maintenance_requests(audit_only, keys, tick), "maintenance") == [["audit-only:b"]]
    assert {r.tags["ckpt/compacts"] for r in runs} == {"true"} and len({r.run_key for r in runs}) == len(runs)


def test_every_schedule_evaluates_as_the_daemon_evaluates_it(instance) -> None:
    """Through `evaluate_tick`, as the daemon and the UI's "Test schedule" call them, at 10,000
    checkpoints: batched runs, and a skip before any checkpoint is known."""
    defs = build_definitions([CheckpointRoot(name="prod", url="/prod")])
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 11, 21, 6))
    schedules = {s.name: s for s in defs.schedules}
    expected = {"maintenance_prod": 50, "checkpoint_audit_schedule": 20, "checkpoint_fleet_schedule": 1}
    for name in ("maintenance_prod", "checkpoint_audit_schedule"):
        assert schedules[name].evaluate_tick(context).skip_message, name
    instance.add_dynamic_partitions(
        "checkpoints", [f"prod:team-{i % 40:02d}/q{i:05d}" for i in range(10_000)]
    )
    for name, runs in expected.items():
        assert len(schedules[name].evaluate_tick(context).run_requests or []) == runs, name


def test_every_job_runs_its_steps_in_the_run_process() -> None:
    """No new interpreter per step (docs/dagster.md): each job, the asset jobs included, resolves
    to Dagster's in-process executor."""
    defs = build_definitions([CheckpointRoot(name="prod", url="/prod")], queries={})
    names = [job.name for job in defs.resolve_all_job_defs()]
    assert {"maintain_checkpoints", "checkpoint_audit"} <= set(names)
    assert {name: defs.resolve_job_def(name).executor_def.name for name in names} == dict.fromkeys(
        names, dg.in_process_executor.name
    )
