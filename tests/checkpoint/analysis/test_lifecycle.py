"""The life of a checkpoint after its query: dormancy told from the logs' times against a manual
clock (DORMANT, STOPPED_MID_BATCH), in validation, the fleet view and the CLI (the commit sensor's
rare looks at a dormant checkpoint: tests/orchestration/test_dormancy.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from checkpoint.analysis import FindingCode, Severity, ValidationOptions, totals, validate
from checkpoint.analysis.checks import unfinished_batch
from checkpoint.analysis.fleet import fleet_row
from checkpoint.format import AUDIT_FOLDER
from checkpoint.model import load_head
from checkpoint.policy import POLICY
from checkpoint.safety import folder_name
from checkpoint.storage import Storage
from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from tests.support.cli import ckpt

DAY = 86400.0


def _codes(ckpt_, now: float | None, **options) -> dict[str, tuple]:
    found = validate(ckpt_, ValidationOptions(now=now, **options)).findings
    return {f.code: (f.severity, f.message) for f in found}


def test_dormancy_is_told_by_the_clock_it_is_given_and_hides_no_other_finding(corpus) -> None:
    chain = load_head(str(corpus["long_chain"]), strict=False)
    last = chain.last_activity_mtime
    assert last is not None
    assert FindingCode.DORMANT not in _codes(chain, None)  # no clock given: never told
    assert FindingCode.DORMANT not in _codes(chain, last + POLICY.dormant_seconds - 1)
    found = _codes(chain, last + POLICY.dormant_seconds)
    severity, message = found[FindingCode.DORMANT]
    assert severity == Severity.INFO
    assert "1 week without a commit or an offset; last commit: batch 31" in message
    assert FindingCode.LONG_REPLAY_CHAIN in found  # the other findings still show
    assert FindingCode.DORMANT in _codes(chain, last + 3600, dormant_seconds=3600)  # the policy's period

    killed = load_head(str(corpus["killed_before_restart"]), strict=False)
    assert unfinished_batch(killed) == killed.latest_committed_batch + 1
    found = _codes(killed, killed.last_activity_mtime + 8 * DAY)
    assert FindingCode.DORMANT not in found
    severity, message = found[FindingCode.STOPPED_MID_BATCH]
    assert severity == Severity.INFO
    assert f"batch {unfinished_batch(killed)} was planned and never committed" in message

    now = max(last, killed.last_activity_mtime) + 8 * DAY
    rows = [fleet_row("chain", chain, now=now), fleet_row("killed", killed, now=now)]
    assert (rows[0].dormant_since, rows[0].stopped_mid_batch_since) == (last, None)
    assert (rows[1].dormant_since, rows[1].stopped_mid_batch_since) == (None, killed.last_activity_mtime)
    assert (totals(rows).dormant, totals(rows).stopped_mid_batch) == (1, 1)
    assert [r.dormant_since for r in (fleet_row("chain", chain, now=last + DAY),)] == [None]


@pytest.mark.parametrize("age_days, dormant", [(9, True), (6, False)])
def test_the_cli_names_dormant_checkpoints_in_validate_and_fleet(corpus, tmp_path, age_days, dormant) -> None:
    root = tmp_path / "root"
    copy_checkpoint(corpus["long_chain"], root / "orders")
    copy_checkpoint(corpus["killed_before_restart"], root / "clicks")
    date_to(root, age_days * DAY)
    validated = ckpt("validate", str(root / "orders"), "--json")
    codes = {f["code"]: f["severity"] for f in json.loads(validated.stdout)["findings"]}
    assert validated.returncode == 0 and (codes.get("DORMANT") == "info") == dormant
    fleet = ckpt("fleet", str(root), "--no-cleanup-plan", "--json")
    rows = {r["url"].rsplit("/", 1)[1]: r for r in json.loads(fleet.stdout)["checkpoints"]}
    assert (rows["orders"]["dormant_since"] is not None) == dormant
    assert (rows["clicks"]["stopped_mid_batch_since"] is not None) == dormant
    assert rows["clicks"]["dormant_since"] is None  # an unfinished batch: stopped mid-batch, not dormant
    text = ckpt("fleet", str(root), "--no-cleanup-plan").stdout
    assert ("1 dormant, 1 stopped mid-batch" in text) == dormant and ("dormant since" in text) == dormant
    longer = ckpt("fleet", str(root), "--no-cleanup-plan", "--json", "--dormant-after", "30d")
    assert all(r["dormant_since"] is None for r in json.loads(longer.stdout)["checkpoints"])
    if dormant:
        _held_once_per_dormancy(root, rows["orders"])


def _held_once_per_dormancy(root: Path, row: dict) -> None:
    """What a dormant checkpoint holds is not listed by the default view (its trail knows nothing
    yet); `--held` lists it once, keeps it in its audit trail with the time it is dormant since,
    and every view reads it there, until that time moves (it wrote again)."""
    orders = root / "orders"
    files = [p for p in orders.rglob("*") if p.is_file()]
    on_disk = sum(p.stat().st_size for p in files)
    kept = root / AUDIT_FOLDER / folder_name(Storage(str(orders)).url) / "held.json"
    assert (row["files_held"], row["bytes_held"]) == (None, None) and not kept.exists()
    text = ckpt("fleet", str(root), "--no-cleanup-plan").stdout
    assert "period), 2 holding what is not known yet (--held lists them)" in text, text

    def held(*extra: str) -> int:
        out = ckpt("fleet", str(root), "--no-cleanup-plan", "--json", *extra)
        rows = json.loads(out.stdout)["checkpoints"]
        return next(r["bytes_held"] for r in rows if r["url"].endswith("/orders"))

    assert held("--held") == on_disk
    doc = json.loads(kept.read_text())
    assert doc == {"since": row["dormant_since"], "files": len(files), "bytes": on_disk}
    kept.write_text(json.dumps({**doc, "bytes": 7}))
    assert held() == 7 and held("--held") == 7  # not listed again
    for bad in ("x" * 10_000, json.dumps({**doc, "bytes": -1}), json.dumps({**doc, "bytes": True}) + "[", ""):
        kept.write_text(bad)
        assert held() is None  # what it says is checked, never trusted
        assert held("--held") == on_disk
    # Numbers that are not counts: 1,001 digits (an OverflowError in the text view), 2^63, `true`
    # for 1, a float. Each is listed again, in the text view too, never a traceback.
    for bad in ({"bytes": int("9" * 1001)}, {"bytes": 1 << 63}, {"bytes": (1 << 48) + 1}, {"files": True},
                {"files": 3.0}):  # fmt: skip
        kept.write_text(json.dumps({**doc, **bad}))
        rows = json.loads(ckpt("fleet", str(root), "--no-cleanup-plan", "--json", "--held").stdout)[
            "checkpoints"
        ]
        row = next(r for r in rows if r["url"].endswith("/orders"))
        assert (row["files_held"], row["bytes_held"]) == (len(files), on_disk), bad
        kept.write_text(json.dumps({**doc, **bad}))
        text = ckpt("fleet", str(root), "--no-cleanup-plan")
        assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    # A link or a FIFO put at it (anyone may write the trail) is replaced, never written through
    # nor blocked on: the review's link overwrote an outside file, its FIFO hung the plan.
    victim = root / "victim.txt"
    victim.write_text("keep")
    kept.unlink()
    kept.symlink_to(victim)
    assert held("--held") == on_disk and victim.read_text() == "keep" and not kept.is_symlink()
    kept.unlink()
    os.mkfifo(kept)
    assert held() is None and held("--held") == on_disk and kept.is_file()
    kept.write_text(json.dumps({**doc, "bytes": 7}))
    date_to(orders, 10 * DAY)  # a later dormancy (as after a commit): not known, listed again
    assert held() is None and held("--held") == on_disk
