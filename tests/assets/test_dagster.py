"""The audit layer executed by Dagster: discovery sensor ticks, partitioned materializations, checks."""

from __future__ import annotations

import re
import shutil

import dagster as dg
import pytest

from assets.checkpoints import (
    COMMIT_LOG_CHECK,
    LINEAGE_CHECK,
    SNAPSHOT_CHECK,
    checkpoint_inventory,
    checkpoint_lineage_report,
)
from assets.partitions import CHECKPOINTS, parse_partition_key, partition_key
from assets.resources import CheckpointRoot, CheckpointRootsResource
from checkpoint.model.head import load_head
from orchestration.due import SensorState
from orchestration.location import build_definitions
from testbed.copying import copy_checkpoint
from tests.support.assets import discovery_tick, roots_over
from tests.support.paths import PROJECT
from tests.support.runs import batches_of

AUDIT = [checkpoint_inventory, checkpoint_lineage_report]


def test_partition_keys_are_readable_and_reversible() -> None:
    for rel in ["team-a/orders", "", "a b/c,d|e[1]/f...g", "ünï/çødé", "100%/x"]:
        key = partition_key("prod", rel)
        assert parse_partition_key(key) == ("prod", rel)
        assert not any(bad in key for bad in (",", "[", "]", "|", "...", " "))
    assert partition_key("prod", "team-a/orders") == "prod:team-a/orders"
    with pytest.raises(ValueError):
        parse_partition_key("no-colon")


def test_discovery_sensor_adds_then_idles_then_removes(instance, corpus, tmp_path) -> None:
    root = tmp_path / "root"
    copy_checkpoint(corpus["snapshots"], root / "a" / "orders")
    copy_checkpoint(corpus["join"], root / "b" / "clicks")
    roots = roots_over(root, "local")

    first = discovery_tick(instance, roots)
    assert isinstance(first, dg.SensorResult)
    assert sorted(instance.get_dynamic_partitions("checkpoints")) == ["local:a/orders", "local:b/clicks"]
    # One batched audit run for both, as the commit sensor's validation is.
    assert [r.job_name for r in first.run_requests] == ["validate_checkpoints"]
    audited = first.run_requests[0].run_config["ops"]["validate_each"]["config"]["partitions"]
    assert audited == ["local:a/orders", "local:b/clicks"]
    assert first.run_requests[0].tags["ckpt/bulk"] == "true"  # a bulk audit: one at a time

    second = discovery_tick(instance, roots, first.cursor)
    assert isinstance(second, dg.SkipReason)
    assert "none new or vanished" in second.skip_message
    # The tick added its partitions itself; had it not ended (its runs never asked for, its cursor
    # not kept), the next asks for the audits again: the same run, by its run key.
    lost = discovery_tick(instance, roots, None)
    assert isinstance(lost, dg.SensorResult) and lost.cursor == first.cursor
    assert [r.run_key for r in lost.run_requests] == [r.run_key for r in first.run_requests]
    assert lost.run_requests[0].tags["ckpt/bulk"] == "true"

    instance.add_dynamic_partitions("checkpoints", ["added-by-hand"])
    shutil.rmtree(root / "b")
    third = discovery_tick(instance, roots, first.cursor)
    assert isinstance(third, dg.SensorResult) and not third.run_requests and third.cursor != first.cursor
    assert sorted(instance.get_dynamic_partitions("checkpoints")) == ["added-by-hand", "local:a/orders"]


def test_a_fleet_found_at_once_is_audited_in_capped_batches_over_ticks(
    instance, tmp_path, monkeypatch
) -> None:
    """10 new checkpoints, runs of 3, 2 runs a tick: 6 are added and audited in the first tick, the
    4 others in the next, in order; then nothing. No run is asked for per checkpoint."""
    import dataclasses

    from checkpoint.policy import POLICY
    from orchestration import sensors
    from testbed import synthetic

    for i in range(10):
        synthetic.write_local(tmp_path / f"q{i}", synthetic.files(1, 3, window=3, snapshot_every=5))
    monkeypatch.setattr(sensors, "DISCOVERY_MAX_RUNS", 2)
    monkeypatch.setattr(sensors, "POLICY", dataclasses.replace(POLICY, validation_run_max_checkpoints=3))
    roots = roots_over(tmp_path, "f")
    audited: list[list[str]] = []
    cursor = None
    for _ in range(3):
        result = discovery_tick(instance, roots, cursor)
        if isinstance(result, dg.SkipReason):
            break
        cursor = result.cursor
        assert len(result.run_requests) <= 2
        audited += [r.run_config["ops"]["validate_each"]["config"]["partitions"] for r in result.run_requests]
    assert [len(run) for run in audited] == [3, 3, 3, 1]
    assert [key for run in audited for key in run] == [f"f:q{i}" for i in range(10)]
    assert sorted(instance.get_dynamic_partitions("checkpoints")) == [f"f:q{i}" for i in range(10)]


def test_a_root_that_fails_to_list_keeps_its_partitions(instance, corpus, tmp_path) -> None:
    root = tmp_path / "root"
    copy_checkpoint(corpus["snapshots"], root / "orders")
    discovery_tick(instance, roots_over(root, "local"))
    assert instance.get_dynamic_partitions("checkpoints") == ["local:orders"]
    broken = CheckpointRootsResource(roots=[CheckpointRoot(name="local", url=str(tmp_path / "gone"))])
    assert isinstance(discovery_tick(instance, broken), dg.SkipReason)
    assert instance.get_dynamic_partitions("checkpoints") == ["local:orders"]


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _metadata(result, asset: str) -> dict:
    mat = next(m for m in result.asset_materializations_for_node(asset))
    return {k: v.value for k, v in mat.metadata.items()}


def test_materialize_every_corpus_checkpoint(instance, corpus, corpus_root, loaded) -> None:
    roots = roots_over(corpus_root)
    discovery_tick(instance, roots)
    names = {
        partition_key("corpus", path.relative_to(corpus_root).as_posix()): n for n, path in corpus.items()
    }
    assert sorted(instance.get_dynamic_partitions("checkpoints")) == sorted(names)
    for key, name in names.items():
        result = dg.materialize(AUDIT, partition_key=key, instance=instance, resources={"roots": roots})
        assert result.success, key
        checks = _checks(result)
        assert set(checks) == {COMMIT_LOG_CHECK, LINEAGE_CHECK, SNAPSHOT_CHECK}
        assert checks[COMMIT_LOG_CHECK].passed and checks[SNAPSHOT_CHECK].passed, key
        inv = _metadata(result, "checkpoint_inventory")
        ckpt = loaded[name]
        assert inv["latest_committed_batch"] == ckpt.latest_committed_batch
        read = load_head(str(corpus[name]), strict=False)  # what recovery reads, not the whole listing
        assert inv["files"] == len(read.files) and inv["bytes"] == read.total_bytes
        assert re.search(r"^\| (changelog|zip) +\|", inv["files_by_kind"], re.MULTILINE)
        report = _metadata(result, "checkpoint_lineage_report")
        assert report["stores"] == sum(
            len(op.store_names) * op.num_partitions for op in ckpt.operators.values()
        )
        if name == "long_chain":
            assert not checks[LINEAGE_CHECK].passed
            assert checks[LINEAGE_CHECK].severity == dg.AssetCheckSeverity.WARN
            assert report["max_chain_length"] == 32 and re.search(r"\|\s+32\s+\|", report["worst_chains"])
        else:
            assert checks[LINEAGE_CHECK].passed, key


def test_every_default_format_checkpoint_passes_its_checks(instance, defaults) -> None:
    """The HDFS-backed store and RocksDB V1, as Spark writes them by default: every audit check
    passes, where they used to fail and block everything downstream."""
    root = next(iter(defaults.values())).parent.parent
    roots = roots_over(root, "defaults")
    discovery_tick(instance, roots)
    keys = sorted(instance.get_dynamic_partitions("checkpoints"))
    assert len(keys) == len(defaults)
    for key in keys:
        result = dg.materialize(AUDIT, partition_key=key, instance=instance, resources={"roots": roots})
        checks = _checks(result)
        failed = {name for name, c in checks.items() if not c.passed}
        # The one warning of the corpus: a delta-only chain of 12, past the threshold.
        assert result.success and failed == ({LINEAGE_CHECK} if "hdfs_deltas" in key else set()), key
        assert all(checks[name].severity == dg.AssetCheckSeverity.WARN for name in failed), key
        assert _metadata(result, "checkpoint_inventory")["format_version"] == 1


def test_an_error_finding_blocks_the_lineage_report(instance, copy_of, tmp_path) -> None:
    damaged = copy_of("snapshots")
    (damaged / "commits" / "5").unlink()
    roots = roots_over(damaged.parent, "t")
    key = partition_key("t", damaged.name)
    instance.add_dynamic_partitions("checkpoints", [key])
    result = dg.materialize(
        AUDIT, partition_key=key, instance=instance, resources={"roots": roots}, raise_on_error=False
    )
    check = _checks(result)[COMMIT_LOG_CHECK]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert "COMMIT_LOG_GAP" in check.metadata["codes"].value
    assert not result.success
    assert [m.asset_key.path[-1] for m in result.get_asset_materialization_events()] == [
        "checkpoint_inventory"
    ]


def test_the_audit_job_runs_from_the_definitions(instance, corpus_root) -> None:
    defs = build_definitions([CheckpointRoot(name="corpus", url=str(corpus_root))], long_chain_threshold=40)
    key = partition_key("corpus", "long_chain/checkpoint")
    instance.add_dynamic_partitions(CHECKPOINTS, [key])
    result = defs.resolve_job_def("checkpoint_audit").execute_in_process(partition_key=key, instance=instance)
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())  # no warning at a threshold of 40
    assert {m.asset_key.path[-1] for m in result.get_asset_materialization_events()} == {
        "checkpoint_inventory",
        "checkpoint_lineage_report",
    }


def test_an_unreadable_checkpoint_fails_the_run_with_its_reason(instance, tmp_path) -> None:
    (tmp_path / "gone").mkdir()
    key = partition_key("t", "gone")
    instance.add_dynamic_partitions("checkpoints", [key])
    result = dg.materialize(
        AUDIT,
        partition_key=key,
        instance=instance,
        resources={"roots": roots_over(tmp_path, "t")},
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "cannot be read" in str(failure.event_specific_data.error) and "not a streaming checkpoint" in str(
        failure.event_specific_data.error
    )


def test_the_audit_schedule_requests_every_checkpoint_in_batched_runs(instance) -> None:
    """10,000 checkpoints are 20 validation runs of 500, each naming its checkpoints, every one
    once; a re-evaluated tick asks for the same runs (run keys), a later one for new ones."""
    from datetime import datetime

    from orchestration.schedules import checkpoint_audit_schedule

    ctx = dg.build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 11, 21, 6))
    assert isinstance(checkpoint_audit_schedule(ctx), dg.SkipReason)
    keys = [f"prod:team-{i % 37:02d}/q{i:05d}" for i in range(10_000)]
    instance.add_dynamic_partitions("checkpoints", keys)
    requests = checkpoint_audit_schedule(ctx)
    assert len(requests) == 20 and {r.job_name for r in requests} == {"validate_checkpoints"}
    named = batches_of(requests, "validation")
    assert sorted(k for run in named for k in run) == sorted(keys) and max(map(len, named)) == 500
    assert {r.tags["dagster/priority"] for r in requests} == {"20"}
    assert {r.tags.get("ckpt/bulk") for r in requests} == {"true"}  # one at a time (dagster.yaml)
    assert {r.tags.get("dagster/max_runtime") for r in requests} == {"7200"}  # and none stuck for hours
    assert [r.run_key for r in checkpoint_audit_schedule(ctx)] == [r.run_key for r in requests]
    later = dg.build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 11, 21, 12))
    assert not {r.run_key for r in checkpoint_audit_schedule(later)} & {r.run_key for r in requests}


@pytest.mark.slow
def test_v1_compaction_in_dagster_compacts_a_stopped_query_and_skips_a_running_one(
    instance, defaults, tmp_path, no_gathering, spark
) -> None:
    """The same assets and sensor on the HDFS-backed store: a running query's crossing is neither
    requested nor taken for an error by the commit sensor, and its compaction run succeeds having
    skipped it and written nothing; the stopped copy's run gets every store its snapshot."""
    from assets.compaction import checkpoint_compaction
    from assets.resources import SparkResource
    from orchestration.sensors import checkpoint_commit_sensor
    from testbed.clock import date_back
    from tests.support.files import files_of

    for name in ("stopped", "running"):
        copy_checkpoint(defaults["hdfs_deltas"], tmp_path / name)
    date_back(tmp_path / "stopped", 2 * 3600)
    (tmp_path / "running" / "commits" / "11").touch()
    roots = roots_over(tmp_path, "v1")
    discovery_tick(instance, roots)
    keys = {parse_partition_key(k)[1]: k for k in instance.get_dynamic_partitions(CHECKPOINTS)}
    tick = checkpoint_commit_sensor(
        dg.build_sensor_context(instance=instance, resources={"roots": roots}, cursor=None)
    )
    assert batches_of(tick) == [[keys["stopped"]]], tick.run_requests
    assert SensorState.from_json(tick.cursor).urgent == []
    before = files_of(tmp_path / "running")
    resources = {"roots": roots, "spark": SparkResource(master="local[2]")}
    done = {}
    for name, key in keys.items():
        result = dg.materialize([*AUDIT, checkpoint_compaction], partition_key=key, instance=instance,
                                resources=resources)  # fmt: skip
        assert result.success, name
        done[name] = _metadata(result, "checkpoint_compaction")
    assert (done["stopped"]["stores_compacted"], done["stopped"]["max_chain_after"]) == (4, 0)
    assert done["running"]["stores_compacted"] == 0
    assert "only while the query is stopped" in done["running"]["skipped"]
    assert files_of(tmp_path / "running") == before


def test_the_deployment_queues_runs_as_the_shipped_instance(tmp_path) -> None:
    """deploy/dagster.yaml keeps the shipped run queue (one run per checkpoint at a time, one
    compacting run at a time, the compaction pool at 1 counted per step: docs/dagster.md says why
    not per run) and the shipped logging; the docs' recipe copies it and names every file it uses."""
    import yaml

    project = PROJECT
    shutil.copy(project / "dagster_home" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as shipped:
        pools = shipped.get_concurrency_config().pool_config
        limits = shipped.get_concurrency_config().run_queue_config.tag_concurrency_limits
    assert (pools.pool_granularity, pools.default_pool_limit) == (None, 1)
    assert {"key": "ckpt/compacts", "value": "true", "limit": 1} in limits
    assert {"key": "ckpt/bulk", "value": "true", "limit": 1} in limits
    ours = yaml.safe_load((tmp_path / "dagster.yaml").read_text())
    deployed = yaml.safe_load((project / "deploy" / "dagster.yaml").read_text())
    assert deployed["concurrency"]["pools"] == ours["concurrency"]["pools"]
    assert (
        deployed["concurrency"]["runs"]["tag_concurrency_limits"]
        == ours["concurrency"]["runs"]["tag_concurrency_limits"]
    )
    for section in ("python_logs", "telemetry", "nux"):
        assert deployed[section] == ours[section], section
    assert deployed["storage"]["postgres"]["postgres_url"] == {"env": "DAGSTER_PG_URL"}
    page = (project / "docs" / "dagster.md").read_text()
    recipe = page.split("## Deploy", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert "deploy/workspace.yaml" in recipe and "deploy/dagster.yaml" in recipe


def test_the_settings_table_names_every_variable_the_code_location_reads() -> None:
    import re as regex

    project = PROJECT
    read = {
        name
        for folder in ("orchestration", "assets")
        for path in (project / folder).glob("*.py")
        for name in regex.findall(r"environ\.get\(\s*\"(CKPT_[A-Z_]+)\"", path.read_text())
    }
    assert len(read) >= 12
    table = (
        (project / "docs" / "dagster.md").read_text().split("### Every setting", 1)[1].split("\n## ", 1)[0]
    )
    assert {name for name in read if f"`{name}`" not in table} == set()
