"""The life of a checkpoint after its query: dormancy told from the logs' times against a manual
clock (DORMANT, STOPPED_MID_BATCH), in validation, the fleet view and the CLI, and the commit
sensor's rare looks at a dormant checkpoint."""

from __future__ import annotations

import base64
import json
import os
import shutil
import zlib
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
from orchestration.due import Caps, Look, SensorState, lists_dormant, looking_order, plan_tick
from testbed.copying import copy_checkpoint
from testbed.demo import date_to
from tests.support.cli import ckpt
from tests.support.clock import ShiftedTime

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


CAPS = Caps(max_runs_per_tick=5, max_queued_per_job=3, validation_period_seconds=900,
            max_per_validation_run=50, dormant_look_seconds=DAY, dormant_list_seconds=DAY)  # fmt: skip
QUEUE = {"compact": 0, "validate": 0}


def test_the_sensor_looks_at_a_dormant_checkpoint_once_a_day_and_a_commit_wakes_it() -> None:
    """Decided on a manual clock (orchestration/due.py); the real sensor below."""
    state = plan_tick(
        SensorState(), {"a": Look(5, new=True), "z": Look(3, new=True)}, 0.0, CAPS, QUEUE, set()
    ).state
    state = plan_tick(state, {"a": Look(5), "z": Look(3, dormant=True)}, 60.0, CAPS, QUEUE, set()).state
    assert state.dormant == {"z": 60.0}
    assert looking_order(["a", "z"], state, 61.0, DAY) == ["a"]
    assert looking_order(["a", "z"], state, 60.0 + DAY, DAY) == ["a", "z"]  # its daily look
    again = plan_tick(state, {"z": Look(3, dormant=True)}, 60.0 + DAY, CAPS, QUEUE, set()).state
    assert again.dormant == {"z": 60.0 + DAY}
    woken = plan_tick(again, {"z": Look(4, new=True)}, 60.0 + 2 * DAY, CAPS, QUEUE, set())
    assert woken.state.dormant == {} and woken.validate == (("z",),)  # looked at every round again
    assert looking_order(["a", "z"], woken.state, 61.0 + 2 * DAY, DAY) == ["a", "z"]
    # Hourly looks at a dormant checkpoint: one a day lists its commits, whatever its name, and
    # never in the same hour for the whole fleet.
    for key in ("z", "f:orders", "s3:team/é"):
        hours = [lists_dormant(key, SensorState(dormant={key: 3600.0 * h}), 3600.0 * (h + 1), DAY)
                 for h in range(24 * 7)]  # fmt: skip
        assert sum(hours) == 7 and all(sum(hours[d * 24 : d * 24 + 24]) <= 2 for d in range(7)), key
    assert lists_dormant("z", SensorState(), 60.0, DAY)  # not dormant: every look lists

    def first_listing(key: str) -> int:
        return min(h for h in range(24) if lists_dormant(key, SensorState(dormant={key: 3600.0 * h}),
                                                         3600.0 * (h + 1), DAY))  # fmt: skip

    firsts = {first_listing(f"k{i}") for i in range(100)}
    assert len(firsts) > 12  # spread over the day
    # The cursor keeps it; the release before's has none; a time in the future is clamped to now.
    assert SensorState.from_json(again.to_json()).dormant == again.dormant
    body = json.loads(zlib.decompress(base64.b64decode(again.to_json()[3:])))
    del body["dormant"]
    old = "z1:" + base64.b64encode(zlib.compress(json.dumps(body).encode())).decode()
    assert SensorState.from_json(old).dormant == {} and SensorState.from_json(old).seen == again.seen
    future, _ = SensorState.read(SensorState(seen={"z": 3}, dormant={"z": 1e15}).to_json(), 100.0)
    assert future.dormant == {"z": 100.0}  # no cursor can postpone a look past one interval


def test_the_real_sensor_skips_dormant_checkpoints_until_their_daily_look(
    corpus, tmp_path, monkeypatch
) -> None:
    """Two real checkpoints: `orders` stopped 9 days ago, `clicks` 8 hours ago. After the first round
    the sensor lists only `clicks`' commits each tick; `orders`' once a day, and each hour between
    it stats the commit after its newest; after its query ran again (the copy its restart wrote),
    the next hourly look wakes it."""
    import dagster as dg

    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from checkpoint.storage import Storage as RealStorage
    from orchestration import sensors

    root = tmp_path / "root"
    copy_checkpoint(corpus["killed_before_restart"], root / "orders")
    copy_checkpoint(corpus["long_chain"], root / "clicks")
    date_to(root / "orders", 9 * DAY)
    date_to(root / "clicks", 8 * 3600)
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(root))])
    looked: list[str] = []
    statted: list[str] = []
    real, real_stat = sensors.newest_commit, RealStorage.stat

    def counted(storage):
        looked.append(storage.url.rsplit("/", 1)[1])
        return real(storage)

    def stat(self, rel):
        statted.append(f"{self.url.rsplit('/', 1)[1]}/{rel}")
        return real_stat(self, rel)

    clock = ShiftedTime()
    monkeypatch.setattr(sensors, "newest_commit", counted)
    monkeypatch.setattr(sensors, "time", clock)
    monkeypatch.setattr(RealStorage, "stat", stat)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["f:clicks", "f:orders"])

        def tick(cursor: str | None, hours: float = 0.0) -> str | None:
            clock.offset += hours * 3600
            looked.clear()
            statted.clear()
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            result = sensors.checkpoint_commit_sensor(ctx)
            return result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor

        cursor = tick(tick(None))  # first sight of both, then the look that finds `orders` dormant
        state = SensorState.from_json(cursor)
        assert set(state.dormant) == {"f:orders"}
        listings, stats = 0, 0
        for _ in range(24):  # a day of hourly ticks: a stat each hour, a listing once
            cursor = tick(cursor, hours=1)
            assert sorted(looked) in (["clicks"], ["clicks", "orders"]), looked
            listings += looked.count("orders")
            stats += statted.count(f"orders/commits/{state.seen['f:orders'] + 1}")
        assert (listings, stats) == (1, 23)
        cursor = tick(cursor, hours=0.5)
        assert looked == ["clicks"] and not statted  # within the hour of its last look: nothing
        shutil.rmtree(root / "orders")
        copy_checkpoint(corpus["killed_after_restart"], root / "orders")  # its query ran again
        date_to(root / "orders", 0, now=clock.time())
        cursor = tick(cursor, hours=1)
        assert sorted(looked) == ["clicks", "orders"] and SensorState.from_json(cursor).dormant == {}
        cursor = tick(cursor, hours=1 / 60)
        assert sorted(looked) == ["clicks", "orders"]  # awake: looked at every tick
