"""The commit sensor's later looks at a dormant checkpoint on Azure Blob Storage (Azurite) and on
GCS (the emulator behind its proxy), as the daemon evaluates it, each request counted at the
store's proxy: once a checkpoint is dormant, an hourly look is one stat of the commit after its
newest, one look a day lists its commits, nothing between, and the next hourly look after its
query commits again wakes it. An upload is new to the store, which dates it: the sensor's clock is
moved on nine days instead (the local twin: `tests/checkpoint/analysis/test_lifecycle.py`)."""

from __future__ import annotations

from urllib.parse import unquote

from checkpoint.model.head import load_head
from testbed.copying import upload_checkpoint
from tests.support.clock import ShiftedTime
from tests.support.runs import checkpoints_of

DAY, HOUR = 86400.0, 3600.0


def test_a_dormant_checkpoint_costs_a_stat_an_hour_and_a_listing_a_day_and_a_commit_wakes_it(
    cloud_store, corpus, monkeypatch
) -> None:
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors
    from orchestration.due import SensorState

    fs, protocol, base, proxy = (cloud_store[k] for k in ("fs", "protocol", "base", "proxy"))
    where = f"{base}/sensor/orders"

    def upload(name: str) -> None:
        upload_checkpoint(fs, corpus[name], where, protocol, cloud_store["spark"](where), folder_markers=True)

    upload("killed_before_restart")
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="c", url=f"{protocol}://{base}/sensor")])
    clock = ShiftedTime(9 * DAY)  # the upload reads as nine days old: past the dormancy (7 days)
    monkeypatch.setattr(sensors, "time", clock)
    key = partition_key("c", "orders")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [key])

        def tick(cursor: str | None, hours: float = 0.0) -> tuple[object, str | None]:
            clock.offset += hours * HOUR
            proxy.reset()
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            result = sensors.checkpoint_commit_sensor(ctx)
            return result, result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor

        _, cursor = tick(tick(None)[1])  # first sight, then the look that finds it dormant
        state = SensorState.from_json(cursor)
        assert set(state.dormant) == {key}
        newest = state.seen[key]
        looks, paths = [], set()
        for _ in range(24):  # a day of hourly ticks
            _, cursor = tick(cursor, hours=1)
            looks.append(dict(proxy.counts()))
            paths |= {unquote(r.path) for r in proxy.requests if r.op == "stat"}
        assert sorted(looks, key=str) == sorted([{"list": 1}] + [{"stat": 1}] * 23, key=str), looks
        assert paths and all(p.endswith(f"/sensor/orders/commits/{newest + 1}") for p in paths), paths
        _, cursor = tick(cursor, hours=0.5)
        assert proxy.counts() == {}  # within the hour of its last look: nothing at all

        upload("killed_after_restart")  # its query ran again
        woken, cursor = tick(cursor, hours=1)
        state = SensorState.from_json(cursor)
        latest = load_head(str(corpus["killed_after_restart"])).latest_committed_batch
        assert state.dormant == {} and state.seen[key] == latest > newest
        assert isinstance(woken, dg.SensorResult)
        assert key in {k for r in woken.run_requests for k in checkpoints_of(r)}  # validated again
        _, cursor = tick(cursor, hours=1 / 60)
        assert proxy.counts().get("list") == 1  # awake: listed every tick again
