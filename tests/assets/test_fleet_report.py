"""The fleet report as Dagster materializes it over real checkpoints: every partition read with
Dagster's history of each, the most urgent rows shown and every row filed, the target Spark's
verdicts, dormant checkpoints counted, and its checks' severities."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.checkpoints import checkpoint_inventory, checkpoint_lineage_report
from assets.cleanup import checkpoint_orphan_cleanup, checkpoint_orphan_plan
from assets.fleet import HEADROOM_CHECK, NO_ERRORS_CHECK, checkpoint_fleet_report
from assets.resources import CheckpointRoot, CheckpointRootsResource
from checkpoint.format.changelog import LINEAGE_HEADER_CAP
from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from tests.support.fleet import NEAR, fleet_of


@pytest.fixture(scope="module")
def fleet_root(corpus, tmp_path_factory) -> Path:
    return fleet_of(corpus, tmp_path_factory.mktemp("fleet") / "root")


def _report(root: Path, before=None, target: str | None = None, run_config: dict | None = None):
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(root))], target_spark=target)
    keys = sorted(roots.discover("f"))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", keys)
        if before is not None:
            before(instance, roots)
        result = dg.materialize([checkpoint_fleet_report], instance=instance, resources={"roots": roots},
                                run_config=run_config, raise_on_error=False)  # fmt: skip
        if run_config and not result.success:  # a Launchpad run's config that the asset refuses
            return keys, result, {}
        assert result.success
        (mat,) = result.asset_materializations_for_node("checkpoint_fleet_report")
        meta = {k: v.value for k, v in mat.metadata.items()}
        meta["chart"] = Path(meta["chart"]).read_text()  # the instance's folder goes with it
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    return keys, meta, checks


def test_the_fleet_report_reads_every_partition_and_dagster_history(fleet_root) -> None:
    def plan_orders(instance, roots):  # a maintenance pass's dry run leaves a plan and a cleanup
        cleanup = [
            checkpoint_inventory,
            checkpoint_lineage_report,
            checkpoint_orphan_plan,
            checkpoint_orphan_cleanup,
        ]
        assert dg.materialize(
            cleanup, partition_key="f:orders", instance=instance, resources={"roots": roots}
        ).success

    keys, meta, checks = _report(fleet_root, plan_orders)
    table = {r.data["checkpoint"]: r.data for r in meta["fleet"].records}
    assert sorted(table) == keys and meta["checkpoints"] == 5
    assert [r.data["checkpoint"] for r in meta["fleet"].records][:2] == ["f:teams/at-cap", "f:teams/broken"]
    assert meta["unhealthy_checkpoints"] == 2 and meta["longest_chain"] == 32
    orders = table["f:orders"]
    assert orders["reclaimable"].endswith(" ago)") and orders["last_cleanup"].endswith(": dry run")
    assert meta["reclaimable_bytes"] > 0  # only orders has a plan: the others are unknown, not zero
    assert table["f:chain"]["reclaimable"] == "unknown" and table["f:chain"]["last_compaction"] == "never"
    assert "f:teams/at-cap" in meta["needs_attention"] and "ckpt compact" in meta["needs_attention"]
    assert meta["chart"].startswith("<svg") and "teams/at-cap" in meta["chart"]
    assert meta["chart_image"].startswith("![fleet chart](data:image/svg+xml;base64,")
    assert re.search(r"\| errors +\| 1 of 1 +\|", meta["shown_per_need"]), meta["shown_per_need"]
    assert (
        not checks[NO_ERRORS_CHECK].passed and checks[NO_ERRORS_CHECK].severity == dg.AssetCheckSeverity.ERROR
    )
    assert (
        not checks[HEADROOM_CHECK].passed and checks[HEADROOM_CHECK].severity == dg.AssetCheckSeverity.ERROR
    )


def test_the_report_shows_the_most_urgent_rows_and_files_every_row(fleet_root, monkeypatch) -> None:
    """At 10,000 checkpoints the metadata table would be megabytes a run: the UI gets the most
    urgent rows and the count of the rest; the CSV in the audit root has every row, in the same
    order; the chart's histogram counts every checkpoint. A failed cleanup run of a checkpoint
    (its blocking audit failed) shows in its row."""
    import dataclasses

    import pandas as pd

    import assets.fleet
    from orchestration.location import build_definitions

    monkeypatch.setattr(assets.fleet, "POLICY", dataclasses.replace(assets.fleet.POLICY, fleet_table_rows=2))

    def fail_cleanup(instance, roots):
        defs = build_definitions(list(roots.roots))
        job = defs.resolve_job_def("checkpoint_cleanup")
        key = "f:teams/broken"
        assert not job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False).success

    keys, meta, _ = _report(fleet_root, fail_cleanup)
    shown = [r.data["checkpoint"] for r in meta["fleet"].records]
    assert shown == ["f:teams/at-cap", "f:teams/broken"] and meta["rows_not_shown"] == 3
    table = Path(meta["fleet_table"])
    assert table.parent == fleet_root / "_ckpt_audit" / "fleet"
    every = pd.read_csv(table)
    assert list(every["key"][:2]) == shown and sorted(every["key"]) == keys
    broken = every.set_index("key").loc["f:teams/broken"]
    assert broken["last_cleanup"].endswith(": FAILED") and "CHAIN" in broken["errors"]
    assert "5 checkpoints by their longest replay chain" in meta["chart"]


def test_the_report_tells_which_checkpoints_the_target_spark_restarts(fleet_root) -> None:
    """The deployment's target (CKPT_TARGET_SPARK), or a Launchpad run's: a column and the counts.
    Under 4.0, the aggregations on changelogs restart (one way: 4.0's snapshots are read by no later
    Spark) and the one on snapshots this Spark wrote does not (docs/format.md, upgrade readiness)."""
    _, meta, _ = _report(fleet_root, target="4.0")
    said = {r.data["checkpoint"]: r.data["restarts_on_target"] for r in meta["fleet"].records}
    assert said.pop("f:orders") == "no: snapshot-metadata-v1"
    assert set(said.values()) == {"yes, one way"}
    counts = {
        k: meta[k] for k in ("target_spark", "restart_on_target", "refused_on_target", "unknown_on_target")
    }
    assert counts == {
        "target_spark": "4.0",
        "restart_on_target": 4,
        "refused_on_target": 1,
        "unknown_on_target": 0,
    }
    assert meta["actions_refused_on_target"] == {"compact": 5, "repartition": 5}
    launched = {"ops": {"checkpoint_fleet_report": {"config": {"target_spark": "4.3.0"}}}}
    _, meta, _ = _report(fleet_root, target="4.0", run_config=launched)
    assert (meta["target_spark"], meta["restart_on_target"]) == ("4.3", 5)
    _, meta, _ = _report(fleet_root)
    assert "target_spark" not in meta and {r.data["restarts_on_target"] for r in meta["fleet"].records} == {
        "-"
    }
    launched["ops"]["checkpoint_fleet_report"]["config"]["target_spark"] = "3.5"
    _, failed, _ = _report(fleet_root, run_config=launched)
    assert not failed.success and "cover Spark 4.0, 4.1, 4.2, 4.3" in str(failed.get_step_failure_events())


def test_the_report_shows_dormant_checkpoints_and_counts_them(corpus, tmp_path) -> None:
    root = tmp_path / "root"
    for name, folder in (("long_chain", "orders"), ("killed_before_restart", "clicks"), ("join", "joins")):
        copy_checkpoint(corpus[name], root / folder)
    date_to(root / "orders", 9 * 86400)
    date_to(root / "clicks", 8 * 86400)
    date_to(root / "joins", 8 * 3600)
    _, meta, _ = _report(root)  # no checkpoint listed: what they hold is not known yet
    assert (meta["dormant_checkpoints"], meta["stopped_mid_batch_checkpoints"]) == (1, 1)
    assert meta["dormant_bytes"] == 0
    idle = {r.data["checkpoint"]: r.data["dormant_since"] for r in meta["fleet"].records}
    assert re.search(r" UTC \(stopped mid-batch\)$", idle["f:clicks"]) and idle["f:orders"].endswith(" UTC")
    _, meta, _ = _report(root, run_config={"ops": {"checkpoint_fleet_report": {"config": {"held": True}}}})
    held = sum(
        sum(p.stat().st_size for p in (root / name).rglob("*") if p.is_file())
        for name in ("orders", "clicks")
    )
    assert meta["dormant_bytes"] == held
    idle = {r.data["checkpoint"]: r.data["dormant_since"] for r in meta["fleet"].records}
    assert idle["f:joins"] == "-" and re.search(
        r" UTC \(stopped mid-batch, [\d.]+ KiB held\)$", idle["f:clicks"]
    )
    assert re.search(r" UTC \([\d.]+ KiB held\)$", idle["f:orders"]), idle


def test_the_fleet_checks_pass_or_warn_at_the_right_level(fleet_root, tmp_path) -> None:
    healthy = tmp_path / "healthy"
    shutil.copytree(fleet_root / "chain", healthy / "chain")
    _, _, checks = _report(healthy)
    assert checks[NO_ERRORS_CHECK].passed and checks[HEADROOM_CHECK].passed
    shutil.copytree(fleet_root / "teams" / "near-cap", healthy / "near-cap")
    _, meta, checks = _report(healthy)
    assert checks[NO_ERRORS_CHECK].passed
    assert not checks[HEADROOM_CHECK].passed and checks[HEADROOM_CHECK].severity == dg.AssetCheckSeverity.WARN
    assert meta["worst_header_fraction"] == pytest.approx(NEAR / LINEAGE_HEADER_CAP, abs=1e-3)
