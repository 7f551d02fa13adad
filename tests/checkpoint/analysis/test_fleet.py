"""The fleet view over real checkpoints: one row per checkpoint, as `ckpt lineage`, `ckpt validate`
and `ckpt gc` see each one, ranked by need (the Dagster report is tests/assets/test_fleet_report.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint.analysis.checks import Severity
from checkpoint.analysis.fleet import FleetRow, headroom, shown
from checkpoint.format.changelog import LINEAGE_HEADER_CAP
from tests.support.cli import ckpt
from tests.support.fleet import fleet_of


@pytest.fixture(scope="module")
def fleet_root(corpus, tmp_path_factory) -> Path:
    return fleet_of(corpus, tmp_path_factory.mktemp("fleet") / "root")


def _json(*args: str) -> tuple[int, dict]:
    out = ckpt(*args, "--json", timeout=300)
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
        # A store whose committed version has its own zip starts its lineage again there: the row's
        # headroom leaves it out (a cold corpus' `two_actions` had its longest header in one).
        read = [s["lineage_header_bytes"] for s in lineage["stores"] if s["snapshot_version"] != s["version"]]
        header = max(read, default=0) / LINEAGE_HEADER_CAP
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
