"""The commit sensor's rare looks at a dormant checkpoint (dormancy itself is told in
tests/checkpoint/analysis/test_lifecycle.py): decided on a manual clock, then the real sensor on
real checkpoints dated back."""

from __future__ import annotations

import base64
import json
import shutil
import zlib

from orchestration.due import Caps, Look, SensorState, lists_dormant, looking_order, plan_tick
from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from tests.support.clock import ShiftedTime

DAY = 86400.0


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
