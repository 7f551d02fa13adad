"""Cleanup through Dagster: plan -> blocking check -> apply only when asked, under the lease, in
batches and ranges."""

from __future__ import annotations

import re
import shutil
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest

from assets.checkpoints import (
    COMMIT_LOG_CHECK,
    LINEAGE_CHECK,
    SNAPSHOT_CHECK,
    checkpoint_inventory,
    checkpoint_lineage_report,
)
from assets.cleanup import (
    APPLY_TAG,
    PLAN_CHECK,
    checkpoint_orphan_cleanup,
    checkpoint_orphan_plan,
)
from assets.partitions import partition_key
from assets.ranges import value_for
from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
from checkpoint.cleanup import REPLANNED
from checkpoint.safety import PlannedFile
from checkpoint.safety.lease import lease_for
from orchestration.location import build_definitions
from testbed.copying import copy_checkpoint
from testbed.demo import date_back
from tests.support.runs import batches_of

CLEANUP = [checkpoint_inventory, checkpoint_lineage_report, checkpoint_orphan_plan, checkpoint_orphan_cleanup]


@pytest.fixture
def aged_root(corpus, tmp_path) -> Path:
    root = tmp_path / "root"
    copy_checkpoint(corpus["two_actions"], root / "orders")
    date_back(root, 8 * 3600)
    return root


def _setup(instance, root: Path, **options) -> tuple[CheckpointRootsResource, str]:
    # The corpus' queries are stopped, and this deployment says so (else the live rules apply).
    stopped = CheckpointRoot(name="t", url=str(root), queries_stopped=True)
    roots = CheckpointRootsResource(roots=[stopped], **options)
    key = partition_key("t", "orders")
    instance.add_dynamic_partitions("checkpoints", [key])
    return roots, key


def _metadata(result, asset: str) -> dict:
    mat = next(iter(result.asset_materializations_for_node(asset)))
    return {k: v.value for k, v in mat.metadata.items()}


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_a_ui_run_is_a_dry_run(instance, aged_root) -> None:
    roots, key = _setup(instance, aged_root)
    before = _files(aged_root / "orders")
    result = dg.materialize(CLEANUP, partition_key=key, instance=instance, resources={"roots": roots})
    assert result.success
    plan = _metadata(result, "checkpoint_orphan_plan")
    assert plan["files"] > 0 and "superseded" in plan["by_reason"]
    assert Path(plan["manifest"]).exists()
    cleanup = _metadata(result, "checkpoint_orphan_cleanup")
    assert cleanup["applied"] is False and cleanup["would_delete_files"] == plan["files"]
    assert _files(aged_root / "orders") == before


@pytest.mark.parametrize("how", ["config", "tag"])
def test_apply_when_asked(instance, aged_root, how) -> None:
    roots, key = _setup(instance, aged_root)
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
    plan = _metadata(result, "checkpoint_orphan_plan")
    cleanup = _metadata(result, "checkpoint_orphan_cleanup")
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
    assert _metadata(again, "checkpoint_orphan_plan")["files"] == 0
    assert _metadata(again, "checkpoint_orphan_cleanup")["deleted_files"] == 0


def test_an_error_finding_blocks_planning_and_deleting(instance, aged_root) -> None:
    roots, key = _setup(instance, aged_root)
    (aged_root / "orders" / "commits" / "2").unlink()
    before = _files(aged_root / "orders")
    result = dg.materialize(
        CLEANUP, partition_key=key, instance=instance, resources={"roots": roots},
        tags={APPLY_TAG: "true"}, raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    materialized = {m.asset_key.path[-1] for m in result.get_asset_materialization_events()}
    assert materialized == {"checkpoint_inventory"}
    assert _files(aged_root / "orders") == before


def test_apply_refuses_a_plan_whose_commit_log_changed(instance, aged_root) -> None:
    roots, key = _setup(instance, aged_root)
    planned = dg.materialize(
        [checkpoint_orphan_plan], partition_key=key, instance=instance, resources={"roots": roots},
        selection=[checkpoint_orphan_plan],
    )  # fmt: skip
    assert planned.success
    commit = aged_root / "orders" / "commits" / "3"
    commit.write_text(commit.read_text() + "\n")
    before = _files(aged_root / "orders")
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
    assert _files(aged_root / "orders") == before


def test_an_edited_manifest_deletes_nothing_through_dagster(instance, aged_root) -> None:
    """The reproduction: a dry plan run, then lines naming the query metadata and the newest
    commit and offset (true size and mtime) appended to its manifest, then a run of the cleanup
    alone with apply. The digest in the plan's metadata (Dagster's event log) refuses it."""
    roots, key = _setup(instance, aged_root)
    planned = dg.materialize(
        [checkpoint_orphan_plan], partition_key=key, instance=instance, resources={"roots": roots},
        selection=[checkpoint_orphan_plan],
    )  # fmt: skip
    manifest = Path(_metadata(planned, "checkpoint_orphan_plan")["manifest"])
    ckpt = aged_root / "orders"
    latest = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    with manifest.open("a") as f:
        for rel in ("metadata", f"commits/{latest}", f"offsets/{latest}"):
            st = (ckpt / rel).stat()
            f.write(PlannedFile(rel, st.st_size, st.st_mtime, "superseded", None).line())
    before = _files(ckpt)
    defs = build_definitions([CheckpointRoot(name="t", url=str(aged_root))])
    result = defs.resolve_job_def("checkpoint_cleanup").execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False,
        asset_selection=[checkpoint_orphan_cleanup.key],
        run_config={"ops": {"checkpoint_orphan_cleanup": {"config": {"apply": True}}}},
    )  # fmt: skip
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "not the one planned" in str(failure.event_specific_data.error)
    assert _files(ckpt) == before


def test_a_launchpad_run_config_aimed_at_another_root_changes_nothing(instance, aged_root, tmp_path) -> None:
    """The reproduction: a cleanup run for a configured partition whose run config names another
    folder as the root, with no quiet period, one retained batch and apply. The deployed roots
    take no run config: the run fails its config check, and nothing changes anywhere."""
    other = tmp_path / "other"
    copy_checkpoint(aged_root / "orders", other / "orders")
    _, key = _setup(instance, aged_root)
    defs = build_definitions([CheckpointRoot(name="t", url=str(aged_root))])
    before = (_files(aged_root), _files(other))
    hostile = {"roots": [{"name": "t", "url": str(other)}], "quiet_period": "0s", "retain_batches": 1,
               "audit_url": str(tmp_path / "audit")}  # fmt: skip
    with pytest.raises(dg.DagsterInvalidConfigError):
        defs.resolve_job_def("checkpoint_cleanup").execute_in_process(
            partition_key=key, instance=instance,
            run_config={"resources": {"roots": {"config": hostile}},
                        "ops": {"checkpoint_orphan_cleanup": {"config": {"apply": True}}}},
        )  # fmt: skip
    assert (_files(aged_root), _files(other)) == before


@pytest.mark.parametrize(
    "spark",
    [{"remote": "sc://elsewhere:15002"}, {"master": "spark://elsewhere:7077"},
     {"conf": {"spark.hadoop.fs.s3a.endpoint": "http://elsewhere"}}],
    ids=["remote", "master", "conf"],
)  # fmt: skip
def test_a_launchpad_run_config_cannot_re_aim_spark(instance, aged_root, spark) -> None:
    """The Spark resource is the deployment's, as the roots are: a run that sets its master,
    remote or conf fails its config check in every job, and a run of one changes nothing."""
    _, key = _setup(instance, aged_root)
    defs = build_definitions([CheckpointRoot(name="t", url=str(aged_root))])
    before = _files(aged_root)
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
    assert _files(aged_root) == before


def test_a_batched_run_names_what_its_config_gets_wrong_and_audits_the_rest(instance, aged_root) -> None:
    """A run's config is input: a key that is no partition key, a root that is not configured, a
    path out of the root, each fail alone, named; the real checkpoint is audited."""
    from orchestration.jobs import validate_checkpoints_job
    from orchestration.validation import validation_request

    roots, key = _setup(instance, aged_root)
    hostile = ["no-colon", "elsewhere:orders", "t:../../etc"]
    run = validation_request([key, *hostile], "by hand").run_config
    result = validate_checkpoints_job.execute_in_process(
        run_config=run, instance=instance, resources={"roots": roots}, raise_on_error=False
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data
    assert "3 of 4 checkpoint(s) failed" in str(failure.error)
    failed = failure.user_failure_data.metadata["failed"].value
    for name, why in zip(hostile, ("not a checkpoint partition key", "no configured checkpoint root", "'..'"),
                         strict=True):  # fmt: skip
        assert name in failed and why in failed, (name, failed)
    assert instance.get_materialized_partitions(dg.AssetKey("checkpoint_lineage_report")) == {key}
    # each checkpoint's result of each audit check, for its partition (the run's own over all of
    # them fails): what the catalog shows per checkpoint and an alert fires on
    checks = {(c.name, i.partition_key): i.latest_execution_status.value
              for c in (dg.AssetCheckKey(dg.AssetKey("checkpoint_inventory"), "commit_log_consistency"),
                        dg.AssetCheckKey(dg.AssetKey("checkpoint_lineage_report"), "lineage_completeness"),
                        dg.AssetCheckKey(dg.AssetKey("checkpoint_lineage_report"), "snapshot_integrity"))
              for i in instance.event_log_storage.get_asset_check_partition_info([c])}  # fmt: skip
    assert checks == {(name, key): "SUCCEEDED" for name, _ in checks} and len(checks) == 3, checks
    broken = "t:gone"
    instance.add_dynamic_partitions("checkpoints", [broken])
    run = validation_request([key, broken], "by hand").run_config
    validate_checkpoints_job.execute_in_process(run_config=run, instance=instance, resources={"roots": roots},
                                               raise_on_error=False)  # fmt: skip
    logs = [e.message for e in instance.all_logs(result.run_id) if e.message]
    assert any("validating 4 checkpoint(s) head-first" in m for m in logs), logs
    assert any("validated 4 of 4 checkpoint(s), 3 failed" in m for m in logs), logs
    failed = instance.event_log_storage.get_asset_check_partition_info(
        [dg.AssetCheckKey(dg.AssetKey("checkpoint_lineage_report"), "lineage_completeness")]
    )
    assert {i.partition_key: i.latest_execution_status.value for i in failed} == {
        key: "SUCCEEDED",
        broken: "FAILED",
    }


def test_a_run_whose_csv_cannot_be_written_still_names_every_failure(instance, aged_root, tmp_path) -> None:
    from orchestration.jobs import validate_checkpoints_job
    from orchestration.validation import validation_request

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    roots, key = _setup(instance, aged_root, audit_url=str(blocked))
    run = validation_request([key, "no-colon"], "by hand").run_config
    result = validate_checkpoints_job.execute_in_process(
        run_config=run, instance=instance, resources={"roots": roots}, raise_on_error=False
    )
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data
    assert "1 of 2 checkpoint(s) failed" in str(failure.error) and "its CSV was not written" in str(
        failure.error
    )
    metadata = failure.user_failure_data.metadata
    assert "no-colon" in metadata["failed"].value and metadata["csv"].value.startswith("not written: ")
    assert blocked.read_text() == "not a folder"


@pytest.mark.slow
def test_a_batched_maintenance_run_compacts_cleans_and_keeps_each_failure_with_its_checkpoint(
    instance, corpus, tmp_path, spark
) -> None:
    """One run over a root that applies cleanup: a long chain compacted, an old checkpoint cleaned,
    a damaged one failed alone (named in the run's failure, its files untouched); one run over a
    root that only plans: planned, nothing deleted. Executed by Dagster from the schedules' own
    requests, each in one Spark application."""
    from checkpoint.model.head import load_head
    from checkpoint.model.lineage import checkpoint_lineage
    from checkpoint.storage import Storage
    from orchestration.jobs import maintain_checkpoints_job
    from orchestration.maintenance import maintenance_requests

    copies = {"prod/orders": "two_actions", "prod/chain": "long_chain", "prod/broken": "two_actions",
              "other/orders": "two_actions"}  # fmt: skip
    for folder, name in copies.items():
        copy_checkpoint(corpus[name], tmp_path / folder)
    date_back(tmp_path, 8 * 3600)
    (tmp_path / "prod" / "broken" / "commits" / "2").unlink()  # COMMIT_LOG_GAP
    prod = CheckpointRoot(name="prod", url=str(tmp_path / "prod"), apply_cleanup=True, queries_stopped=True)
    other = CheckpointRoot(name="other", url=str(tmp_path / "other"), queries_stopped=True)
    roots = CheckpointRootsResource(roots=[prod, other])
    keys = ["prod:broken", "prod:chain", "prod:orders", "other:orders"]
    instance.add_dynamic_partitions("checkpoints", keys)
    before = {name: _files(tmp_path / name) for name in ("prod/broken", "other/orders", "prod/orders")}
    resources = {"roots": roots, "spark": SparkResource(master="local[2]")}
    tick = datetime(2026, 11, 21, 3, 30).isoformat()
    results = {}
    for root in (prod, other):
        (request,) = maintenance_requests(root, keys, tick)
        results[root.name] = maintain_checkpoints_job.execute_in_process(
            run_config=request.run_config, instance=instance, resources=resources, raise_on_error=False,
            tags=request.tags,
        )  # fmt: skip

    assert not results["prod"].success
    failure = next(e for e in results["prod"].all_events if e.event_type_value == "STEP_FAILURE")
    data = failure.event_specific_data
    assert "1 of 3 checkpoint(s) failed" in str(data.error)
    failed_table = data.user_failure_data.metadata["failed"].value
    assert (
        "prod:broken" in failed_table
        and "COMMIT_LOG_GAP" in failed_table
        and "prod:orders" not in failed_table
    )
    assert _files(tmp_path / "prod" / "broken") == before["prod/broken"]
    chain = load_head(Storage(str(tmp_path / "prod" / "chain")), strict=True)
    assert max(e.chain_length for e in checkpoint_lineage(chain, chain.latest_committed_batch)) == 0
    assert len(_files(tmp_path / "prod" / "orders")) < len(before["prod/orders"])  # cleaned
    csv = data.user_failure_data.metadata["csv"].value
    assert Path(csv).read_text().count("\n") == 4  # a header and a row per checkpoint

    assert results["other"].success
    assert _files(tmp_path / "other" / "orders") == before["other/orders"]  # planned only
    # Audited, its errors in its metadata, as the audit asset records a failed check; taken no further.
    assert instance.get_materialized_partitions(dg.AssetKey("checkpoint_lineage_report")) == set(keys)
    assert instance.get_materialized_partitions(dg.AssetKey("checkpoint_orphan_plan")) == set(keys[1:])
    assert instance.get_materialized_partitions(dg.AssetKey("checkpoint_compaction")) == {"prod:chain"}
    assert instance.get_materialized_partitions(dg.AssetKey("checkpoint_orphan_cleanup")) == {
        "prod:chain", "prod:orders"
    }  # fmt: skip


def test_compaction_asset_and_commit_sensor(
    instance, corpus, tmp_path, spark, monkeypatch, no_gathering
) -> None:
    from assets.compaction import checkpoint_compaction
    from assets.resources import SparkResource
    from orchestration.jobs import validate_checkpoints_job
    from orchestration.sensors import checkpoint_commit_sensor

    root = tmp_path / "root"
    copy_checkpoint(corpus["long_chain"], root / "chain")
    copy_checkpoint(corpus["snapshots"], root / "snap")
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="t", url=str(root))])
    keys = [partition_key("t", "chain"), partition_key("t", "snap")]
    instance.add_dynamic_partitions("checkpoints", keys)

    ctx = dg.build_sensor_context(instance=instance, resources={"roots": roots})
    first = checkpoint_commit_sensor(ctx)
    # Only the long chain crosses 10 and is compacted (compaction validates first); the other is
    # validated, in one batched run.
    assert batches_of(first) == [[keys[0]]] and batches_of(first, "validation") == [[keys[1]]]
    (validation,) = [r for r in first.run_requests if r.job_name == "validate_checkpoints"]
    checked = validate_checkpoints_job.execute_in_process(
        run_config=validation.run_config, instance=instance, resources={"roots": roots}
    )
    assert checked.success  # executed by Dagster: it materialized the snapshots checkpoint's audit
    audited = [e.event_specific_data.materialization for e in checked.all_events
               if e.event_type_value == "ASSET_MATERIALIZATION"]  # fmt: skip
    assert {(m.asset_key.to_user_string(), m.partition) for m in audited} == {
        ("checkpoint_inventory", keys[1]), ("checkpoint_lineage_report", keys[1])
    }  # fmt: skip
    again = dg.build_sensor_context(instance=instance, resources={"roots": roots}, cursor=first.cursor)
    planned = []
    monkeypatch.setattr(CheckpointRootsResource, "compaction_plan", lambda *a: planned.append(a) or ([], []))
    assert isinstance(checkpoint_commit_sensor(again), dg.SkipReason)  # same commits: nothing new
    assert planned == []  # and no lineage header was read to find that out
    monkeypatch.undo()

    resources = {"roots": roots, "spark": SparkResource(master="local[2]")}
    result = dg.materialize(
        [checkpoint_inventory, checkpoint_lineage_report, checkpoint_compaction],
        partition_key=keys[0], instance=instance, resources=resources,
    )  # fmt: skip
    assert result.success
    meta = _metadata(result, "checkpoint_compaction")
    assert meta["stores_compacted"] == 4 and meta["stores_failed"] == 0
    assert meta["max_chain_before"] >= 10 and meta["max_chain_after"] == 0
    assert re.search(r"\| 0/0/default +\|", meta["compacted"])


def test_a_cleanup_run_waits_for_the_lease_then_fails_naming_its_holder(instance, aged_root) -> None:
    """Another deployment (or the CLI) holds the checkpoint's lease: the apply step deletes nothing."""
    roots, key = _setup(instance, aged_root, lease_wait="1s", lease_retries=0)
    before = _files(aged_root / "orders")
    other = lease_for(roots.checkpoint_storage(key), "dagster run 77aa (another deployment)").acquire()
    try:
        result = dg.materialize(CLEANUP, partition_key=key, instance=instance, resources={"roots": roots},
                                tags={APPLY_TAG: "true"}, raise_on_error=False)  # fmt: skip
    finally:
        other.release()
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "dagster run 77aa (another deployment)" in str(failure.event_specific_data.error)
    assert _files(aged_root / "orders") == before
    done = dg.materialize(CLEANUP, partition_key=key, instance=instance, resources={"roots": roots},
                          tags={APPLY_TAG: "true"})  # fmt: skip
    assert done.success and _metadata(done, "checkpoint_orphan_cleanup")["deleted_files"] > 0


def test_a_compaction_only_run_over_a_damaged_checkpoint_writes_nothing(
    instance, corpus, tmp_path, spark
) -> None:
    from assets.compaction import checkpoint_compaction
    from assets.resources import SparkResource

    root = tmp_path / "root"
    copy_checkpoint(corpus["long_chain"], root / "orders")
    (root / "orders" / "commits" / "20").unlink()  # COMMIT_LOG_GAP
    roots, key = _setup(instance, root)
    before = _files(root / "orders")
    resources = {"roots": roots, "spark": SparkResource(master="local[1]")}
    result = dg.materialize(
        [checkpoint_compaction],
        partition_key=key,
        instance=instance,
        raise_on_error=False,
        resources=resources,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "COMMIT_LOG_GAP" in str(failure.event_specific_data.error)
    assert _files(root / "orders") == before


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
            roots, key = _setup(instance, aged_root, lease_wait="1s", lease_retries=0)
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
    assert _metadata(results["first"], "checkpoint_orphan_cleanup")["deleted_files"] > 0


def test_the_apply_step_plans_again_under_the_lease_when_the_query_moved(instance, aged_root) -> None:
    """The query starts again between the plan step and the apply step (a new batch is planned):
    the apply step sees it, plans again under the lease (a second listing, only then), and the
    recent versions, no longer deletable for a live query, stay."""
    roots, key = _setup(instance, aged_root)
    ckpt = aged_root / "orders"
    planned = dg.materialize([checkpoint_orphan_plan], partition_key=key, instance=instance,
                             resources={"roots": roots})  # fmt: skip
    first = _metadata(planned, "checkpoint_orphan_plan")
    latest = max(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    shutil.copy(ckpt / "offsets" / str(latest), ckpt / "offsets" / str(latest + 1))  # the query is live
    result = dg.materialize([checkpoint_orphan_cleanup], partition_key=key, instance=instance,
                            resources={"roots": roots}, tags={APPLY_TAG: "true"})  # fmt: skip
    applied = _metadata(result, "checkpoint_orphan_cleanup")
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


def test_every_partitioned_asset_backfills_in_ranges(tmp_path) -> None:
    from assets.ranges import RANGE

    defs = build_definitions([CheckpointRoot(name="t", url=str(tmp_path))])
    graph = defs.get_repository_def().asset_graph
    policies = {k.to_user_string(): graph.get(k).backfill_policy for k in graph.get_all_asset_keys()
                if graph.get(k).partitions_def is not None}  # fmt: skip
    assert len(policies) == 7
    assert all(p is not None and p.max_partitions_per_run in (None, RANGE) for p in policies.values()), (
        policies
    )
    assert -(-10_000 // RANGE) <= 20  # "all partitions" of 10,000 is at most 20 runs


def test_a_range_of_checkpoints_is_audited_planned_and_cleaned_in_one_run(instance, corpus, tmp_path) -> None:
    """What a UI backfill of the cleanup job sends: one run over a range. Each checkpoint is
    planned and cleaned under its own lease, and each partition is materialized; with a damaged
    checkpoint in the range, the blocking check stops the run before anything is deleted."""
    for name in ("a", "b", "c"):
        copy_checkpoint(corpus["two_actions"], tmp_path / "root" / name)
    date_back(tmp_path / "root", 8 * 3600)
    roots = CheckpointRootsResource(
        roots=[CheckpointRoot(name="t", url=str(tmp_path / "root"), queries_stopped=True)]
    )
    keys = ["t:a", "t:b", "t:c"]
    instance.add_dynamic_partitions("checkpoints", keys)
    (tmp_path / "root" / "c" / "commits" / "2").unlink()  # COMMIT_LOG_GAP
    job = build_definitions(roots.roots).resolve_job_def("checkpoint_cleanup")

    def backfill(first: str, last: str):
        tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last,
                APPLY_TAG: "true"}  # fmt: skip
        return job.execute_in_process(instance=instance, tags=tags, raise_on_error=False,
                                      resources={"roots": roots})  # fmt: skip

    before = {name: _files(tmp_path / "root" / name) for name in ("a", "b", "c")}
    stopped = backfill("t:a", "t:c")
    assert not stopped.success
    # The audit's checks are recorded a checkpoint each, never for the range (partition None); the
    # damaged one's failure stops the run at the inventory.
    checks = [(c.check_name, c.partition, c.passed) for c in _evaluations(stopped)]
    assert sorted(checks, key=str) == [(COMMIT_LOG_CHECK, "t:a", True), (COMMIT_LOG_CHECK, "t:b", True),
                              (COMMIT_LOG_CHECK, "t:c", False)]  # fmt: skip
    assert {name: _files(tmp_path / "root" / name) for name in ("a", "b", "c")} == before

    done = backfill("t:a", "t:b")
    assert done.success
    checks = [(c.check_name, c.partition, c.passed) for c in _evaluations(done)]
    audit = {
        (name, key, True) for name in (COMMIT_LOG_CHECK, LINEAGE_CHECK, SNAPSHOT_CHECK) for key in keys[:2]
    }
    assert sorted(checks, key=str) == sorted(
        [*audit, (PLAN_CHECK, None, True)], key=str
    )  # the plan's is the range's
    # A range of one key (what a backfill of scattered keys sends for each): still its partition's.
    lone = backfill("t:b", "t:b")
    assert lone.success
    assert {(c.check_name, c.partition) for c in _evaluations(lone) if c.check_name != PLAN_CHECK} == {
        (name, "t:b") for name in (COMMIT_LOG_CHECK, LINEAGE_CHECK, SNAPSHOT_CHECK)
    }
    for asset in ("checkpoint_lineage_report", "checkpoint_orphan_plan", "checkpoint_orphan_cleanup"):
        assert instance.get_materialized_partitions(dg.AssetKey(asset)) >= {"t:a", "t:b"}, asset
    for name in ("a", "b"):
        assert len(_files(tmp_path / "root" / name)) < len(before[name]), name
    assert _metadata(done, "checkpoint_orphan_cleanup")["deleted_files"] > 0
    # What one partition's readers (the fleet report, the apply) take: its own figures, not the range's.
    for asset, name in (("checkpoint_orphan_plan", "bytes"), ("checkpoint_orphan_cleanup", "deleted_bytes")):
        found = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=["t:a"]), limit=1
        ).records[0]
        metadata = found.asset_materialization.metadata
        assert 2 * value_for(metadata, "t:a", name) == metadata[name].value > 0, asset


def _evaluations(result: dg.ExecuteInProcessResult) -> list[dg.AssetCheckEvaluation]:
    return [
        e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]


def test_a_long_batched_validation_says_where_it_is(instance, aged_root, monkeypatch) -> None:
    """A progress line at least every 10 s of a batched validation (a clock moved by hand: 6 s a
    reading), between its first and its last."""
    import itertools

    from orchestration import validation
    from orchestration.jobs import validate_checkpoints_job

    ticks = itertools.count(step=6.0)
    monkeypatch.setattr(validation, "_clock", lambda: next(ticks))
    roots, key = _setup(instance, aged_root)
    run = validation.validation_request([key, "no-colon", "t:a", "t:b"], "by hand").run_config
    result = validate_checkpoints_job.execute_in_process(
        run_config=run, instance=instance, resources={"roots": roots}, raise_on_error=False
    )
    logs = [e.message for e in instance.all_logs(result.run_id) if e.message and "validat" in e.message]
    between = [m for m in logs if re.search(r"validated [1-3] of 4 checkpoint\(s\), \d failed so far", m)]
    assert len(between) == 2, logs
