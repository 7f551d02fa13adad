"""Cleanup through Dagster: plan -> blocking check -> apply only when asked, under the lease; a
Launchpad's run config narrows it, never widens it. (Batched runs and ranges: test_dagster_batched.)"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.checkpoints import (
    checkpoint_inventory,
    checkpoint_lineage_report,
)
from assets.cleanup import (
    APPLY_TAG,
    PLAN_CHECK,
    checkpoint_orphan_cleanup,
    checkpoint_orphan_plan,
)
from assets.resources import CheckpointRoot
from checkpoint.cleanup import REPLANNED
from checkpoint.safety import PlannedFile
from checkpoint.safety.lease import lease_for
from orchestration.location import build_definitions
from testbed.copying import copy_checkpoint
from tests.support.assets import metadata_of, stopped_root
from tests.support.cli import ckpt
from tests.support.files import files_under

CLEANUP = [checkpoint_inventory, checkpoint_lineage_report, checkpoint_orphan_plan, checkpoint_orphan_cleanup]


def test_a_ui_run_is_a_dry_run(instance, aged_root) -> None:
    roots, key = stopped_root(instance, aged_root)
    before = files_under(aged_root / "orders")
    result = dg.materialize(CLEANUP, partition_key=key, instance=instance, resources={"roots": roots})
    assert result.success
    plan = metadata_of(result, "checkpoint_orphan_plan")
    assert plan["files"] > 0 and "superseded" in plan["by_reason"]
    assert Path(plan["manifest"]).exists()
    cleanup = metadata_of(result, "checkpoint_orphan_cleanup")
    assert cleanup["applied"] is False and cleanup["would_delete_files"] == plan["files"]
    assert files_under(aged_root / "orders") == before


@pytest.mark.parametrize("how", ["config", "tag"])
def test_apply_when_asked(instance, aged_root, how) -> None:
    roots, key = stopped_root(instance, aged_root)
    kwargs = (
        {"run_config": {"ops": {"checkpoint_orphan_cleanup": {"config": {"apply": True}}}}}
        if how == "config"
        else {"tags": {APPLY_TAG: "true"}}
    )
    result = dg.materialize(
        CLEANUP, partition_key=key, instance=instance, resources={"roots": roots}, **kwargs
    )
    assert result.success
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks[PLAN_CHECK].passed
    plan = metadata_of(result, "checkpoint_orphan_plan")
    cleanup = metadata_of(result, "checkpoint_orphan_cleanup")
    assert (
        cleanup["applied"] is True
        and cleanup["deleted_files"] == plan["files"]
        and cleanup["failed_files"] == 0
    )
    assert cleanup["deleted_bytes"] == plan["bytes"]
    assert re.search(r"\| superseded +\|", cleanup["reclaimed_by_reason"])
    assert Path(cleanup["outcomes"]).exists()
    # A second run plans nothing and deletes nothing.
    again = dg.materialize(
        CLEANUP, partition_key=key, instance=instance, resources={"roots": roots}, **kwargs
    )
    assert metadata_of(again, "checkpoint_orphan_plan")["files"] == 0
    assert metadata_of(again, "checkpoint_orphan_cleanup")["deleted_files"] == 0


def test_an_error_finding_blocks_planning_and_deleting(instance, aged_root) -> None:
    roots, key = stopped_root(instance, aged_root)
    (aged_root / "orders" / "commits" / "2").unlink()
    before = files_under(aged_root / "orders")
    result = dg.materialize(
        CLEANUP, partition_key=key, instance=instance, resources={"roots": roots},
        tags={APPLY_TAG: "true"}, raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    materialized = {m.asset_key.path[-1] for m in result.get_asset_materialization_events()}
    assert materialized == {"checkpoint_inventory"}
    assert files_under(aged_root / "orders") == before


def test_apply_refuses_a_plan_whose_commit_log_changed(instance, aged_root) -> None:
    roots, key = stopped_root(instance, aged_root)
    planned = dg.materialize(
        [checkpoint_orphan_plan], partition_key=key, instance=instance, resources={"roots": roots},
        selection=[checkpoint_orphan_plan],
    )  # fmt: skip
    assert planned.success
    commit = aged_root / "orders" / "commits" / "3"
    commit.write_text(commit.read_text() + "\n")
    before = files_under(aged_root / "orders")
    defs = build_definitions([CheckpointRoot(name="t", url=str(aged_root))])
    job = defs.resolve_job_def("checkpoint_cleanup")
    result = job.execute_in_process(
        partition_key=key, instance=instance, tags={APPLY_TAG: "true"}, raise_on_error=False,
        asset_selection=[checkpoint_orphan_cleanup.key],
    )  # fmt: skip
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "refused" in str(failure.event_specific_data.error) and "changed" in str(
        failure.event_specific_data.error
    )
    assert files_under(aged_root / "orders") == before


def test_an_edited_manifest_deletes_nothing_through_dagster(instance, aged_root) -> None:
    """The reproduction: a dry plan run, then lines naming the query metadata and the newest
    commit and offset (true size and mtime) appended to its manifest, then a run of the cleanup
    alone with apply. The digest in the plan's metadata (Dagster's event log) refuses it."""
    roots, key = stopped_root(instance, aged_root)
    planned = dg.materialize(
        [checkpoint_orphan_plan], partition_key=key, instance=instance, resources={"roots": roots},
        selection=[checkpoint_orphan_plan],
    )  # fmt: skip
    manifest = Path(metadata_of(planned, "checkpoint_orphan_plan")["manifest"])
    ckpt = aged_root / "orders"
    latest = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    with manifest.open("a") as f:
        for rel in ("metadata", f"commits/{latest}", f"offsets/{latest}"):
            st = (ckpt / rel).stat()
            f.write(PlannedFile(rel, st.st_size, st.st_mtime, "superseded", None).line())
    before = files_under(ckpt)
    defs = build_definitions([CheckpointRoot(name="t", url=str(aged_root))])
    result = defs.resolve_job_def("checkpoint_cleanup").execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False,
        asset_selection=[checkpoint_orphan_cleanup.key],
        run_config={"ops": {"checkpoint_orphan_cleanup": {"config": {"apply": True}}}},
    )  # fmt: skip
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "not the one planned" in str(failure.event_specific_data.error)
    assert files_under(ckpt) == before


def test_a_launchpad_run_config_aimed_at_another_root_changes_nothing(instance, aged_root, tmp_path) -> None:
    """The reproduction: a cleanup run for a configured partition whose run config names another
    folder as the root, with no quiet period, one retained batch and apply. The deployed roots
    take no run config: the run fails its config check, and nothing changes anywhere."""
    other = tmp_path / "other"
    copy_checkpoint(aged_root / "orders", other / "orders")
    _, key = stopped_root(instance, aged_root)
    defs = build_definitions([CheckpointRoot(name="t", url=str(aged_root))])
    before = (files_under(aged_root), files_under(other))
    hostile = {"roots": [{"name": "t", "url": str(other)}], "quiet_period": "0s", "retain_batches": 1,
               "audit_url": str(tmp_path / "audit")}  # fmt: skip
    with pytest.raises(dg.DagsterInvalidConfigError):
        defs.resolve_job_def("checkpoint_cleanup").execute_in_process(
            partition_key=key, instance=instance,
            run_config={"resources": {"roots": {"config": hostile}},
                        "ops": {"checkpoint_orphan_cleanup": {"config": {"apply": True}}}},
        )  # fmt: skip
    assert (files_under(aged_root), files_under(other)) == before


@pytest.mark.parametrize(
    "spark",
    [{"remote": "sc://elsewhere:15002"}, {"master": "spark://elsewhere:7077"},
     {"conf": {"spark.hadoop.fs.s3a.endpoint": "http://elsewhere"}}],
    ids=["remote", "master", "conf"],
)  # fmt: skip
def test_a_launchpad_run_config_cannot_re_aim_spark(instance, aged_root, spark) -> None:
    """The Spark resource is the deployment's, as the roots are: a run that sets its master,
    remote or conf fails its config check in every job, and a run of one changes nothing."""
    _, key = stopped_root(instance, aged_root)
    defs = build_definitions([CheckpointRoot(name="t", url=str(aged_root))])
    before = files_under(aged_root)
    hostile = {"resources": {"spark": {"config": spark}}}
    jobs = [job for job in defs.resolve_all_job_defs() if "spark" in job.resource_defs]
    assert {"checkpoint_maintenance", "compact_checkpoints", "migrate_checkpoint"} <= {j.name for j in jobs}
    for job in jobs:
        with pytest.raises(dg.DagsterInvalidConfigError):
            dg.validate_run_config(job, hostile)
    with pytest.raises(dg.DagsterInvalidConfigError):
        defs.resolve_job_def("checkpoint_maintenance").execute_in_process(
            partition_key=key, instance=instance, run_config=hostile
        )
    assert files_under(aged_root) == before


def test_a_cleanup_run_waits_for_the_lease_then_fails_naming_its_holder(instance, aged_root) -> None:
    """Another deployment (or the CLI) holds the checkpoint's lease: the apply step deletes nothing."""
    roots, key = stopped_root(instance, aged_root, lease_wait="1s", lease_retries=0)
    before = files_under(aged_root / "orders")
    other = lease_for(roots.checkpoint_storage(key), "dagster run 77aa (another deployment)").acquire()
    try:
        result = dg.materialize(CLEANUP, partition_key=key, instance=instance, resources={"roots": roots},
                                tags={APPLY_TAG: "true"}, raise_on_error=False)  # fmt: skip
    finally:
        other.release()
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "dagster run 77aa (another deployment)" in str(failure.event_specific_data.error)
    assert files_under(aged_root / "orders") == before
    done = dg.materialize(CLEANUP, partition_key=key, instance=instance, resources={"roots": roots},
                          tags={APPLY_TAG: "true"})  # fmt: skip
    assert done.success and metadata_of(done, "checkpoint_orphan_cleanup")["deleted_files"] > 0


def test_two_deployments_never_clean_one_checkpoint_at_once(aged_root, monkeypatch) -> None:
    """Two Dagster instances (two deployments) apply a cleanup of the same checkpoint at the same
    time: the second waits for the lease, then fails naming the first run; the first deletes."""
    import threading

    import checkpoint.cleanup.flow as flow

    slow, inside = threading.Event(), threading.Event()
    real_apply = flow.apply_plan

    def apply_slowly(*args, **kwargs):
        inside.set()
        slow.wait(30)  # holds the lease until the other deployment has given up
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(flow, "apply_plan", apply_slowly)
    results = {}

    def deployment(name: str) -> None:
        with dg.instance_for_test() as instance:
            roots, key = stopped_root(instance, aged_root, lease_wait="1s", lease_retries=0)
            results[name] = dg.materialize(
                CLEANUP, partition_key=key, instance=instance, raise_on_error=False,
                resources={"roots": roots}, tags={APPLY_TAG: "true"},
            )  # fmt: skip

    first = threading.Thread(target=deployment, args=("first",))
    first.start()
    assert inside.wait(120)
    deployment("second")
    slow.set()
    first.join()
    assert results["first"].success and not results["second"].success
    run_id = results["first"].run_id
    failure = next(e for e in results["second"].all_events if e.event_type_value == "STEP_FAILURE")
    assert f"dagster run {run_id} (checkpoint_orphan_cleanup)" in str(failure.event_specific_data.error)
    assert metadata_of(results["first"], "checkpoint_orphan_cleanup")["deleted_files"] > 0


def test_the_apply_step_plans_again_under_the_lease_when_the_query_moved(instance, aged_root) -> None:
    """The query starts again between the plan step and the apply step (a new batch is planned):
    the apply step sees it, plans again under the lease (a second listing, only then), and the
    recent versions, no longer deletable for a live query, stay."""
    roots, key = stopped_root(instance, aged_root)
    ckpt = aged_root / "orders"
    planned = dg.materialize([checkpoint_orphan_plan], partition_key=key, instance=instance,
                             resources={"roots": roots})  # fmt: skip
    first = metadata_of(planned, "checkpoint_orphan_plan")
    latest = max(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    shutil.copy(ckpt / "offsets" / str(latest), ckpt / "offsets" / str(latest + 1))  # the query is live
    result = dg.materialize([checkpoint_orphan_cleanup], partition_key=key, instance=instance,
                            resources={"roots": roots}, tags={APPLY_TAG: "true"})  # fmt: skip
    applied = metadata_of(result, "checkpoint_orphan_cleanup")
    assert result.success and applied["replanned"] is True and applied["plan"] != first["manifest"]
    assert 0 < applied["deleted_files"] < first["files"]
    audit = roots.audit_trail(key)
    again = audit.read_plan(applied["plan"])
    assert again.live and not audit.read_plan(first["manifest"]).live
    superseded = audit.outcomes(audit.read_plan(first["manifest"]))
    assert [o["why"] for o in superseded] == [f"{REPLANNED}: {applied['plan']}"]
    deleted = {o["path"] for o in audit.outcomes(again) if o["outcome"] == "deleted"}
    first_plan = audit.read_plan(first["manifest"])
    kept = [c for chunk in audit.candidates(first_plan) for c in chunk if c.path not in deleted]
    assert kept and all((ckpt / c.path).exists() for c in kept)


def test_the_cli_meets_a_dagster_deployment_whose_audit_trail_is_elsewhere(copy_of, tmp_path) -> None:
    """A Dagster run with `audit_url` set holds the lease (a real run, executed by Dagster); the CLI,
    with its default audit folder, is refused and deletes nothing."""
    import dagster as dg

    from assets.partitions import CHECKPOINTS
    from assets.resources import CheckpointRoot, CheckpointRootsResource

    path = copy_of("two_actions")
    before = files_under(path)
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="t", url=f"file://{path.parent}/")],
                                    audit_url=str(tmp_path / "central-audit"), lease_wait="0s")  # fmt: skip
    seen = {}

    @dg.op(required_resource_keys={"roots"})
    def hold_and_try_the_cli(context) -> None:
        with context.resources.roots.in_place(context, "t:two_actions").held("checkpoint_orphan_cleanup"):
            seen["cli"] = ckpt("gc", str(path), "--apply", "--grace", "0s", "--unsafe-short-grace",
                               "--quiet-period", "0s", "--unsafe-short-quiet-period")  # fmt: skip

    @dg.job
    def lease_job():
        hold_and_try_the_cli()

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(CHECKPOINTS, ["t:two_actions"])
        assert lease_job.execute_in_process(instance=instance, resources={"roots": roots}).success
    assert seen["cli"].returncode == 2 and "checkpoint_orphan_cleanup" in seen["cli"].stderr
    assert files_under(path) == before
    assert not (tmp_path / "central-audit").exists()  # the lease was never kept there
