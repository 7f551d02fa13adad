"""Batched runs through Dagster: maintenance and validation runs of many checkpoints, each failure
kept with its checkpoint; the compaction asset and the commit sensor; backfills in ranges."""

from __future__ import annotations

import re
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
from assets.cleanup import APPLY_TAG, PLAN_CHECK
from assets.partitions import partition_key
from assets.ranges import value_for
from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
from checkpoint.compaction import CompactionPlan
from orchestration.location import build_definitions
from testbed.clock import date_back
from testbed.copying import copy_checkpoint
from tests.support.assets import metadata_of, stopped_root
from tests.support.files import files_under
from tests.support.runs import batches_of


def test_a_batched_run_names_what_its_config_gets_wrong_and_audits_the_rest(instance, aged_root) -> None:
    """A run's config is input: a key that is no partition key, a root that is not configured, a
    path out of the root, each fail alone, named; the real checkpoint is audited."""
    from orchestration.jobs import validate_checkpoints_job
    from orchestration.validation import validation_request

    roots, key = stopped_root(instance, aged_root)
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
    roots, key = stopped_root(instance, aged_root, audit_url=str(blocked))
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
    before = {name: files_under(tmp_path / name) for name in ("prod/broken", "other/orders", "prod/orders")}
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
    assert files_under(tmp_path / "prod" / "broken") == before["prod/broken"]
    chain = load_head(Storage(str(tmp_path / "prod" / "chain")), strict=True)
    assert max(e.chain_length for e in checkpoint_lineage(chain, chain.latest_committed_batch)) == 0
    assert len(files_under(tmp_path / "prod" / "orders")) < len(before["prod/orders"])  # cleaned
    csv = data.user_failure_data.metadata["csv"].value
    assert Path(csv).read_text().count("\n") == 4  # a header and a row per checkpoint

    assert results["other"].success
    assert files_under(tmp_path / "other" / "orders") == before["other/orders"]  # planned only
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
    monkeypatch.setattr(
        CheckpointRootsResource, "compaction_plan", lambda *a: planned.append(a) or CompactionPlan((), ())
    )
    assert isinstance(checkpoint_commit_sensor(again), dg.SkipReason)  # same commits: nothing new
    assert planned == []  # and no lineage header was read to find that out
    monkeypatch.undo()

    resources = {"roots": roots, "spark": SparkResource(master="local[2]")}
    result = dg.materialize(
        [checkpoint_inventory, checkpoint_lineage_report, checkpoint_compaction],
        partition_key=keys[0], instance=instance, resources=resources,
    )  # fmt: skip
    assert result.success
    meta = metadata_of(result, "checkpoint_compaction")
    assert meta["stores_compacted"] == 4 and meta["stores_failed"] == 0
    assert meta["max_chain_before"] >= 10 and meta["max_chain_after"] == 0
    assert re.search(r"\| 0/0/default +\|", meta["compacted"])


def test_a_compaction_only_run_over_a_damaged_checkpoint_writes_nothing(
    instance, corpus, tmp_path, spark
) -> None:
    from assets.compaction import checkpoint_compaction
    from assets.resources import SparkResource

    root = tmp_path / "root"
    copy_checkpoint(corpus["long_chain"], root / "orders")
    (root / "orders" / "commits" / "20").unlink()  # COMMIT_LOG_GAP
    roots, key = stopped_root(instance, root)
    before = files_under(root / "orders")
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
    assert files_under(root / "orders") == before


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

    before = {name: files_under(tmp_path / "root" / name) for name in ("a", "b", "c")}
    stopped = backfill("t:a", "t:c")
    assert not stopped.success
    # The audit's checks are recorded a checkpoint each, never for the range (partition None); the
    # damaged one's failure stops the run at the inventory.
    checks = [(c.check_name, c.partition, c.passed) for c in _evaluations(stopped)]
    assert sorted(checks, key=str) == [(COMMIT_LOG_CHECK, "t:a", True), (COMMIT_LOG_CHECK, "t:b", True),
                              (COMMIT_LOG_CHECK, "t:c", False)]  # fmt: skip
    assert {name: files_under(tmp_path / "root" / name) for name in ("a", "b", "c")} == before

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
        assert len(files_under(tmp_path / "root" / name)) < len(before[name]), name
    assert metadata_of(done, "checkpoint_orphan_cleanup")["deleted_files"] > 0
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
    roots, key = stopped_root(instance, aged_root)
    run = validation.validation_request([key, "no-colon", "t:a", "t:b"], "by hand").run_config
    result = validate_checkpoints_job.execute_in_process(
        run_config=run, instance=instance, resources={"roots": roots}, raise_on_error=False
    )
    logs = [e.message for e in instance.all_logs(result.run_id) if e.message and "validat" in e.message]
    between = [m for m in logs if re.search(r"validated [1-3] of 4 checkpoint\(s\), \d failed so far", m)]
    assert len(between) == 2, logs
