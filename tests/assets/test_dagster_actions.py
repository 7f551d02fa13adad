"""The actions beyond the audit through their Dagster jobs, each on a partition as the Launchpad
launches it: fork, retirement (planned, then applied after the grace), migration (and the
maintenance schedule on a fresh migration), repartition with its undo and the state profile,
rehearsal against the registry, and the purge of expired state behind its check. What each action
does is proven in its own tests under tests/checkpoint/; here, that Dagster's config narrows it,
its metadata tells it, and a destination under no configured root is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from checkpoint.format.layout import FORK_COMPLETE, FORK_STARTED
from checkpoint.model import load_checkpoint, load_head
from checkpoint.rehearsal import Outcome
from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from testbed.recovery import recovery_files
from tests.support.cli import ckpt
from tests.support.copies import stopped_copy
from tests.support.files import digests_of, files_of, files_under
from tests.support.migrating import migrate, restarted_differently, stopped
from tests.support.rehearsal import INPUT, QUERIES
from tests.support.retiring import dormant_copy, outcomes

MARKERS = {FORK_STARTED, FORK_COMPLETE}
EXPIRING = "expiring/checkpoint"  # the operator corpus' query whose TTLs expired
STOPPED = 2 * 3600  # past the quiet period


def test_the_dagster_job_forks_a_partition_into_a_new_one(corpus, tmp_path) -> None:
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot
    from orchestration.location import build_definitions

    root = tmp_path / "root"
    copy_checkpoint(corpus["dedup_agg"], root / "orders")
    defs = build_definitions([CheckpointRoot(name="prod", url=str(root))])
    job = defs.resolve_job_def("fork_checkpoint")

    def launch(destination: Path, batch: int | None = 4) -> dg.ExecuteInProcessResult:
        config = {"source_partition": partition_key("prod", "orders"), "destination": str(destination),
                  "batch": batch, "new_query_id": True}  # fmt: skip
        return job.execute_in_process(
            run_config={"ops": {"fork": {"config": config}}}, instance=instance, raise_on_error=False
        )

    with dg.instance_for_test() as instance:
        result = launch(root / "rollback" / "orders")
        assert result.success
        output = next(e for e in result.all_events if e.event_type_value == "STEP_OUTPUT")
        meta = {k: v.value for k, v in output.event_specific_data.metadata.items()}
        dest = root / "rollback" / "orders"
        assert files_under(dest) == recovery_files(root / "orders", 4).keys() | MARKERS
        assert (meta["files"], meta["batch"]) == (len(files_of(dest)) - len(MARKERS), 4)
        assert meta["bytes"] == result.output_for_node("fork")["bytes"] > 0
        assert meta["copied_files"] == meta["files"] and meta["requests"] > 0 and meta["seconds"] >= 0
        assert meta["partition"] == partition_key("prod", "rollback/orders")
        assert partition_key("prod", "rollback/orders") in instance.get_dynamic_partitions("checkpoints")
        assert load_checkpoint(str(dest)).query_id != load_checkpoint(str(root / "orders")).query_id

        # A destination under no configured root is refused before anything is written: a run
        # cannot copy production state to a place of its own choosing.
        outside = tmp_path / "elsewhere"
        elsewhere = launch(outside, None)
        assert not elsewhere.success and not outside.exists()
        failure = next(e for e in elsewhere.all_events if e.event_type_value == "STEP_FAILURE")
        assert "lies under no configured root" in str(failure.event_specific_data.error)
        assert len(instance.get_dynamic_partitions("checkpoints")) == 1

        refused = launch(root / "rollback" / "orders", batch=3)  # not empty: another fork is there
        assert not refused.success
        failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
        assert "holds a fork of" in str(failure.event_specific_data.error)


def test_the_dagster_job_plans_dormant_partitions_and_a_second_launch_applies_after_the_grace(
    corpus, tmp_path
) -> None:
    import dagster as dg

    from assets.partitions import CHECKPOINTS, partition_key
    from assets.resources import CheckpointRoot
    from orchestration.location import build_definitions
    from tests.support.assets import discovery_tick, roots_over

    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    clicks = root / "clicks"
    copy_checkpoint(corpus["long_chain"], clicks)
    date_to(clicks, 3600)  # an hour: alive
    prod = [
        CheckpointRoot(name="prod", url=str(root)),
        CheckpointRoot(name="cold", url=str(tmp_path / "cold")),
    ]
    defs = build_definitions(prod, retire_grace="1s", unsafe_floors=True)
    job = defs.resolve_job_def("retire_checkpoints")
    assert job.name not in {s.job_name for s in defs.schedules or []} | {
        t.job_name for s in defs.sensors or [] for t in s.targets
    }  # never requested by a schedule or a sensor
    key, alive = partition_key("prod", "orders"), partition_key("prod", "clicks")

    def launch(config: dict, user: str = "ana@example.com") -> dg.ExecuteInProcessResult:
        return job.execute_in_process(run_config={"ops": {"retire": {"config": config}}}, instance=instance,
                                      tags={"dagster/user": user}, raise_on_error=False)  # fmt: skip

    def failure(result: dg.ExecuteInProcessResult) -> str:
        return str(
            next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data
        )

    with dg.instance_for_test() as instance:
        discovery_tick(instance, roots_over(root, "prod"))
        assert set(instance.get_dynamic_partitions(CHECKPOINTS)) == {key, alive}
        refused = launch({"plan": [key, alive], "archive_root": str(tmp_path / "cold")})
        assert not refused.success and f"{alive}: " in failure(refused) and "not dormant" in failure(refused)
        outside = launch({"plan": [key], "archive_root": str(tmp_path / "elsewhere")})
        assert not outside.success and "lies under no configured root" in failure(outside)

        planned = launch({"plan": [key], "archive_root": str(tmp_path / "cold")})
        assert planned.success
        plan_id = planned.output_for_node("retire")[0]["plan_id"]
        assert orders.is_dir()  # planning deletes nothing
        time.sleep(1.1)
        applied = launch({"apply": [{"partition": key, "plan_id": plan_id}]})
        assert applied.success, failure(applied)
        retired = applied.output_for_node("retire")[0]
        assert retired["approved_by"].startswith("ana@example.com (dagster run ")
        assert not orders.exists() and clicks.is_dir()
        assert ckpt("validate", str(tmp_path / "cold" / "orders")).returncode == 0
        steps = outcomes(root, orders, plan_id)
        assert steps[-1]["step"] == "retired" and steps[-1]["approved_by"] == retired["approved_by"]
        discovery_tick(instance, roots_over(root, "prod"))  # discovery drops the partition of a folder gone
        assert set(instance.get_dynamic_partitions(CHECKPOINTS)) == {alive}


def test_the_maintenance_schedule_runs_on_a_fresh_migration(spark, defaults, tmp_path) -> None:
    """The root's maintenance schedule, evaluated and its runs executed by Dagster, on a checkpoint
    migrated a moment ago: every run succeeds and cleanup applies, and the query restarts like an
    untouched copy of its source."""
    import datetime

    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, SparkResource
    from orchestration.location import build_definitions
    from testbed.clock import date_back
    from tests.support.runs import checkpoints_of

    root = tmp_path / "root"
    src = stopped(defaults, "hdfs_agg", tmp_path / "src")
    control = copy_checkpoint(defaults["hdfs_agg"], tmp_path / "control")
    migrate(spark, src, root / "orders", tmp_path / "audit")
    date_back(root, 8 * 3600)
    prod = CheckpointRoot(name="prod", url=str(root), apply_cleanup=True, queries_stopped=True)
    defs = build_definitions([prod], spark=SparkResource(master="local[2]"))
    schedule = defs.get_schedule_def("maintenance_prod")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [partition_key("prod", "orders")])
        when = datetime.datetime.now(datetime.UTC)
        # Entered, so that leaving it takes back the defs-state storage its evaluation makes current.
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=when,
                                       repository_def=defs.get_repository_def()) as context:  # fmt: skip
            requests = list(schedule.evaluate_tick(context).run_requests or [])
        assert [checkpoints_of(r) for r in requests] == [[partition_key("prod", "orders")]]
        job = defs.resolve_job_def(requests[0].job_name)
        for request in requests:
            result = job.execute_in_process(run_config=request.run_config, tags=request.tags,
                                            instance=instance, raise_on_error=False)  # fmt: skip
            assert result.success
            cleanup = [m for m in result.asset_materializations_for_node("maintain_each")
                       if m.asset_key.to_user_string() == "checkpoint_orphan_cleanup"]  # fmt: skip
            assert cleanup and cleanup[0].metadata["applied"].value is True
    assert not restarted_differently(spark, "hdfs_agg", defaults["hdfs_agg"].parent, root / "orders", control,
                                     tmp_path / "more")  # fmt: skip


@pytest.mark.slow
def test_the_dagster_job_migrates_a_partition_into_a_new_one(defaults, tmp_path, spark) -> None:
    """`migrate_checkpoint` from the Launchpad's config: the destination, under a configured root,
    becomes a V2 partition; one under no root is refused with nothing written."""
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, SparkResource
    from orchestration.location import build_definitions

    root = tmp_path / "root"
    stopped(defaults, "hdfs_dedup", root / "orders")
    defs = build_definitions([CheckpointRoot(name="prod", url=str(root))])
    job = defs.resolve_job_def("migrate_checkpoint")

    def launch(destination: Path) -> dg.ExecuteInProcessResult:
        config = {"source_partition": partition_key("prod", "orders"), "destination": str(destination)}
        return job.execute_in_process(run_config={"ops": {"migrate": {"config": config}}}, instance=instance,
                                      resources={"spark": SparkResource(master="local[2]")},
                                      raise_on_error=False)  # fmt: skip

    with dg.instance_for_test() as instance:
        result = launch(root / "v2" / "orders")
        assert result.success
        output = next(e for e in result.all_events if e.event_type_value == "STEP_OUTPUT")
        meta = {k: v.value for k, v in output.event_specific_data.metadata.items()}
        assert (meta["source_state"], meta["stores"]) == ("hdfs V1", 8)  # two operators, four partitions
        assert meta["partition"] in instance.get_dynamic_partitions("checkpoints")
        assert load_head(str(root / "v2" / "orders")).format_version == 2
        outside = tmp_path / "elsewhere"
        refused = launch(outside)
        assert not refused.success and not outside.exists()


def test_dagster_repartitions_undoes_and_profiles_a_partition(spark, corpus, tmp_path) -> None:
    import dagster as dg

    from assets.partitions import CHECKPOINTS, partition_key
    from assets.profile import checkpoint_state_profile
    from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
    from orchestration.location import build_definitions

    root = tmp_path / "root"
    copy_checkpoint(corpus["join"], root / "orders")
    before = digests_of(root / "orders")
    key = partition_key("prod", "orders")
    # A corpus written minutes ago looks like a running query to any quiet period worth having: this
    # deployment says it is unsafe. A run's own config could not have asked for less.
    defs = build_definitions(
        [CheckpointRoot(name="prod", url=str(root))], quiet_period="0s", unsafe_floors=True
    )
    job = defs.resolve_job_def("repartition_checkpoint")

    def launch(**config) -> dg.ExecuteInProcessResult:
        run_config = {"ops": {"repartition": {"config": {"partition": key, **config}}}}
        return job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False)

    def failure(result: dg.ExecuteInProcessResult) -> str:
        return str(
            next(
                e for e in result.all_events if e.event_type_value == "STEP_FAILURE"
            ).event_specific_data.error
        )

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(CHECKPOINTS, [key])
        profiled = dg.materialize(
            [checkpoint_state_profile],
            partition_key=key,
            instance=instance,
            resources={"roots": CheckpointRootsResource(roots=[CheckpointRoot(name="prod", url=str(root))]),
                       "spark": SparkResource(master="local[2]")},
            run_config={"ops": {"checkpoint_state_profile": {"config": {"candidates": [3, 8]}}}},
        )  # fmt: skip
        meta = profiled.asset_materializations_for_node("checkpoint_state_profile")[0].metadata
        assert meta["partitions"].value == 4 and meta["operator_0_self_check"].value is True
        assert "**8 partitions**" in meta["operator_0_predicted"].value and "█" in meta["operator_0"].value

        done = launch(partitions=8)
        assert done.success
        output = done.output_for_node("repartition")
        assert (output["from_partitions"], output["to_partitions"], output["outcome"]) == (
            4,
            8,
            "repartitioned",
        )
        assert "already has 8" in failure(launch(partitions=8))
        assert launch(undo=True).success
        assert digests_of(root / "orders") == before


def test_the_dagster_job_rehearses_a_partition_with_a_registered_query_only(
    spark, corpus, tmp_path, monkeypatch
):
    """Two rehearsals run by Dagster, one that passes and one that Spark refuses (the run fails with
    the condition, and the checkpoint's inventory records it, which the fleet view shows); a query
    outside the registry is refused by Dagster's config check before any step runs."""
    import dagster as dg

    from assets.fleet import checkpoint_fleet_report
    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
    from orchestration.location import build_definitions
    from orchestration.rehearsal import INVENTORY, JOB, RegisteredQuery

    copy_checkpoint(corpus["long_chain"], tmp_path / "root" / "orders")
    before = files_of(tmp_path / "root" / "orders")
    monkeypatch.setenv(INPUT, str(corpus["long_chain"].parent / "input"))
    queries = {"orders": RegisteredQuery(f"{QUERIES}:aggregation"),
               "orders-next": RegisteredQuery(f"{QUERIES}:key_type_changed")}  # fmt: skip
    root = CheckpointRoot(name="prod", url=str(tmp_path / "root"))
    defs = build_definitions([root], spark=SparkResource(master="local[2]"), queries=queries)
    job, key = defs.resolve_job_def(JOB), partition_key("prod", "orders")

    def launch(instance, query: str) -> dg.ExecuteInProcessResult:
        config = {"ops": {"rehearse": {"config": {"partition": key, "query": query}}}}
        return job.execute_in_process(run_config=config, instance=instance, raise_on_error=False)

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [key])
        passed = launch(instance, "orders")
        assert passed.success
        [meta] = [
            e.event_specific_data.metadata for e in passed.all_events if e.event_type_value == "STEP_OUTPUT"
        ]
        assert (meta["passed"].value, meta["outcome"].value) == (True, str(Outcome.EQUAL))
        assert meta["readiness_table"].value == "yes"
        assert meta["spark_version"].value == spark.version
        refused = launch(instance, "orders-next")
        assert not refused.success
        [failure] = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
        meta = failure.event_specific_data.user_failure_data.metadata
        assert meta["condition"].value == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" and not meta["passed"].value
        seen = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=INVENTORY), limit=10).records
        last = [r.asset_observation.metadata["last_rehearsal"].value for r in seen]
        assert last[0].startswith("failed: Spark refused") and "passed" in last
        with pytest.raises(dg.DagsterInvalidConfigError):
            launch(instance, "os:system")
        fleet = dg.materialize([checkpoint_fleet_report], instance=instance,
                               resources={"roots": CheckpointRootsResource(roots=[root])})  # fmt: skip
        [report] = fleet.asset_materializations_for_node("checkpoint_fleet_report")
        [row] = report.metadata["fleet"].value.records
        last = f"failed: Spark refused the restart (Spark {spark.version}, batch 31)"
        assert row.data["last_rehearsal"].endswith(last)
    assert files_of(tmp_path / "root" / "orders") == before


def test_dagster_warns_on_the_share_expired_and_a_launchpad_run_purges_the_partition(
    operators, tmp_path
) -> None:
    import dagster as dg

    from assets.expiry import SHARE_CHECK, checkpoint_expired_state
    from assets.fleet import checkpoint_fleet_report
    from assets.partitions import CHECKPOINTS, partition_key
    from assets.resources import CheckpointRoot
    from checkpoint.analysis import human_bytes
    from orchestration.location import build_definitions
    from tests.support.assets import discovery_tick, roots_over

    root = tmp_path / "root"
    stopped_copy(operators / EXPIRING, root / "orders", STOPPED)
    defs = build_definitions([CheckpointRoot(name="prod", url=str(root))])
    key, roots = partition_key("prod", "orders"), roots_over(root, "prod")

    def look(instance) -> tuple[bool, dict]:
        done = dg.materialize([checkpoint_expired_state], partition_key=key, instance=instance,
                              resources={"roots": roots})  # fmt: skip
        (check,) = done.get_asset_check_evaluations()
        assert check.check_name == SHARE_CHECK
        (materialized,) = done.get_asset_materialization_events()
        meta = materialized.materialization.metadata
        return check.passed, {
            k: meta[k].value for k in ("entries", "expired", "expired_share", "expired_bytes")
        }

    with dg.instance_for_test() as instance:
        discovery_tick(instance, roots)
        assert key in instance.get_dynamic_partitions(CHECKPOINTS)
        passed, before = look(instance)
        assert not passed and before["expired_share"] > 0.25 and before["expired"] > 0  # WARN
        fleet = dg.materialize([checkpoint_fleet_report], instance=instance, resources={"roots": roots})
        (report,) = fleet.asset_materializations_for_node("checkpoint_fleet_report")
        (row,) = report.metadata["fleet"].value.records
        shown = (
            f"{before['expired']:,} ({before['expired_share']:.0%}, {human_bytes(before['expired_bytes'])})"
        )
        assert row.data["expired"] == shown
        job = defs.resolve_job_def("purge_expired_state")
        untouched = files_of(root / "orders")
        for absurd in (float("nan"), 1e18, -1e18):  # a run config's number is checked as a flag is
            refused = job.execute_in_process(
                run_config={"ops": {"purge_expired": {"config": {"partition": key, "as_of": absurd}}}},
                instance=instance, raise_on_error=False,
            )  # fmt: skip
            assert not refused.success and files_of(root / "orders") == untouched
        run = job.execute_in_process(run_config={"ops": {"purge_expired": {"config": {"partition": key}}}},
                                     instance=instance)  # fmt: skip
        assert run.success and run.output_for_node("purge_expired")["expired"] == before["expired"]
        passed, after = look(instance)
        assert passed and after["expired"] == 0 and after["entries"] == before["entries"] - before["expired"]

        stopped_copy(
            operators / EXPIRING, root / "payments", STOPPED
        )  # a backfill's range run: both partitions, one result
        discovery_tick(instance, roots)
        keys = sorted(instance.get_dynamic_partitions(CHECKPOINTS))
        tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
        ranged = dg.materialize([checkpoint_expired_state], instance=instance, resources={"roots": roots},
                                tags=tags)  # fmt: skip
        (check,) = ranged.get_asset_check_evaluations()
        assert not check.passed and check.metadata["over"].value == 1  # the unpurged one
        fleet = dg.materialize([checkpoint_fleet_report], instance=instance, resources={"roots": roots})
        (report,) = fleet.asset_materializations_for_node("checkpoint_fleet_report")
        rows = {r.data["checkpoint"]: r.data["expired"] for r in report.metadata["fleet"].value.records}
        assert rows == {key: f"0 (0%, {human_bytes(0)})", partition_key("prod", "payments"): shown}
