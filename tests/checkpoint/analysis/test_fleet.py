"""The fleet view over real checkpoints: one row per checkpoint, as `ckpt lineage`, `ckpt validate`
and `ckpt gc` see each one; the Dagster report, its history columns and its checks' severities."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.checkpoints import checkpoint_inventory, checkpoint_lineage_report
from assets.cleanup import checkpoint_orphan_cleanup, checkpoint_orphan_plan
from assets.fleet import HEADROOM_CHECK, NO_ERRORS_CHECK, checkpoint_fleet_report
from assets.resources import CheckpointRoot, CheckpointRootsResource
from checkpoint.analysis.checks import Severity
from checkpoint.analysis.fleet import FleetRow, headroom, shown
from checkpoint.format.changelog import LINEAGE_HEADER_CAP
from testbed.copying import copy_checkpoint
from testbed.demo import date_to
from tests.support import damage

CKPT = str(Path(sys.executable).parent / "ckpt")
NEAR, OVER = 45_000, 56_000  # lineage header bytes: 69 % and 85 % of the cap


def _copy(corpus, name: str, dest: Path, edit=None) -> None:
    copy_checkpoint(corpus[name], dest)
    if edit is not None:
        edit(dest)


def _committed(path: Path) -> Path:
    return path / damage.lineage_of(path).committed_file.rel


@pytest.fixture(scope="module")
def fleet_root(corpus, tmp_path_factory) -> Path:
    """Healthy with a long chain, orphans to reclaim, a broken chain, headers at 69 % and 85 % of
    the cap; all stopped, dated past the grace period."""
    root = tmp_path_factory.mktemp("fleet") / "root"
    _copy(corpus, "long_chain", root / "chain")
    _copy(corpus, "two_actions", root / "orders")
    _copy(corpus, "long_chain", root / "teams" / "broken",
          lambda p: damage.remove(p / damage.lineage_of(p).chain[9].rel))  # fmt: skip
    _copy(
        corpus, "long_chain", root / "teams" / "near-cap", lambda p: damage.pad_lineage(_committed(p), NEAR)
    )
    _copy(corpus, "long_chain", root / "teams" / "at-cap", lambda p: damage.pad_lineage(_committed(p), OVER))
    date_to(root, 8 * 3600)  # stopped, not dormant, however old the corpus
    return root


def _json(*args: str) -> tuple[int, dict]:
    out = subprocess.run([CKPT, *args, "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1, 2), out.stderr
    return out.returncode, json.loads(out.stdout) if out.returncode != 2 else {}


def test_ckpt_fleet_agrees_with_lineage_validate_and_gc(fleet_root, tmp_path) -> None:
    _, unplanned = _json("fleet", str(fleet_root))  # no plan in any audit trail yet: unknown, not zero
    assert all(r["reclaimable_bytes"] is None for r in unplanned["checkpoints"])
    code, doc = _json("fleet", str(fleet_root), "--plan")
    assert code == 1  # some checkpoint has errors
    rows = {Path(r["url"]).relative_to(fleet_root).as_posix(): r for r in doc["checkpoints"]}
    assert list(rows) == ["teams/at-cap", "teams/broken", "teams/near-cap", "chain", "orders"]  # by urgency
    for rel, row in rows.items():
        path = str(fleet_root / rel)
        _, lineage = _json("lineage", path)
        assert row["max_chain_length"] == max(s["chain_length"] for s in lineage["stores"]), rel
        header = max(s["lineage_header_bytes"] for s in lineage["stores"]) / LINEAGE_HEADER_CAP
        assert row["max_lineage_header_fraction"] == round(header, 4), rel
        _, validation = _json("validate", path)
        for severity, field in (("error", "errors"), ("warning", "warnings")):
            codes = sorted({f["code"] for f in validation["findings"] if f["severity"] == severity})
            assert row[field] == codes, (rel, field)
        gc_code, gc = _json("gc", path, "--audit", str(tmp_path / "audit"))
        assert row["reclaimable_bytes"] == (gc["plan"]["bytes"] if gc_code == 0 else None), rel
        assert row["live"] is False and row["latest_committed_batch"] is not None
    assert rows["orders"]["reclaimable_bytes"] > 0
    # Without --plan: what the newest plan in each audit trail found, and when; nothing is planned.
    _, known = _json("fleet", str(fleet_root))
    assert [
        (r["url"], r["reclaimable_bytes"], r["reclaimable_planned_at"]) for r in known["checkpoints"]
    ] == [(r["url"], r["reclaimable_bytes"], r["reclaimable_planned_at"]) for r in doc["checkpoints"]]
    assert rows["orders"]["reclaimable_planned_at"] is not None
    assert "REPLAY_CHAIN_BROKEN" in rows["teams/broken"]["errors"]
    assert rows["teams/at-cap"]["errors"] == ["LINEAGE_HEADER_NEAR_CAP"]


def test_headroom_severity_follows_the_policy() -> None:
    assert [headroom(f) for f in (0.1, 0.59, 0.6, 0.79, 0.8, 1.0)] == [
        None, None, Severity.WARNING, Severity.WARNING, Severity.ERROR, Severity.ERROR
    ]  # fmt: skip


def test_the_table_shows_every_kind_of_need_whatever_the_errors_number() -> None:
    """The review's fleet: 1,900 checkpoints with error findings and 21 long chains. The 100 rows
    shown hold all 21 chains beside 79 error rows, most urgent first; healthy rows only fill what
    is left, and the counts say what each kind shows."""

    def row(key: str, errors=(), chain: int = 1) -> FleetRow:
        return FleetRow(key, f"/r/{key}", 5, 60.0, False, tuple(errors), (), chain, "0/0/default", 0.01)

    rows = [row(f"err{i:04d}", errors=("COMMIT_LOG_GAP",)) for i in range(1900)]
    rows += [row(f"chain{i:02d}", chain=20 + i) for i in range(21)] + [row(f"ok{i}") for i in range(81)]
    table, counts = shown(rows, 100)
    assert len(table) == 100 and sum(r.key.startswith("chain") for r in table) == 21
    assert [r.key for r in table][:79] == [f"err{i:04d}" for i in range(79)]  # errors rank above chains
    assert counts == {"errors": "79 of 1900", "long chain": "21 of 21", "healthy": "0 of 81"}
    few, few_counts = shown(rows[1900:], 30)
    assert sum(r.key.startswith("ok") for r in few) == 9 and few_counts["healthy"] == "9 of 81"


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
    _copy(corpus, "long_chain", root / "orders")
    _copy(corpus, "killed_before_restart", root / "clicks")
    _copy(corpus, "join", root / "joins")
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


def test_the_table_ranks_by_the_need_the_attention_list_names() -> None:
    """The reproduction: 15 healthy checkpoints (no finding, chains of 4-5, headers at 0-1 % of
    the cap) were listed above every checkpoint with a LONG_REPLAY_CHAIN warning and a chain of
    30-35, because the ranking sorted on the raw header fraction first. The table now ranks by the
    need `needs_attention` names, in the same order."""
    from checkpoint.analysis.fleet import FleetRow, needs_attention, ranked

    def row(key: str, chain: int, header: float, warnings: tuple[str, ...] = (), errors=()) -> FleetRow:
        return FleetRow(key, f"/f/{key}", 10, 60.0, False, errors, warnings, chain, "0/0/default", header)

    healthy = [row(f"healthy{i:02d}", 4 + i % 2, (i % 2) / 100) for i in range(15)]
    long = [row(f"long{i}", 30 + i, 0.0, ("LONG_REPLAY_CHAIN",)) for i in range(5)]
    broken = row("broken", 3, 0.0, errors=("REPLAY_CHAIN_BROKEN",))
    order = [r.key for r in ranked([*healthy, *long, broken])]
    assert order[:6] == ["broken", "long4", "long3", "long2", "long1", "long0"], order
    attention = [a.row.key for a in needs_attention([*healthy, *long, broken], limit=100)]
    assert attention == order[: len(attention)] and len(attention) == 6
