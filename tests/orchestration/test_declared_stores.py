"""The sensors on checkpoints that declare the absurd (the stores' cross-checks themselves:
tests/checkpoint/model/test_declared_stores.py): a tick sizes nothing by a forged count and asks
for the checkpoint's validation."""

from __future__ import annotations

from tests.support import damage
from tests.support.copies import stopped_copy
from tests.support.runs import checkpoints_of

STOPPED = 8 * 3600  # past the grace and the quiet period


def test_both_sensors_tick_past_a_checkpoint_that_declares_the_absurd(
    defaults, tmp_path, monkeypatch
) -> None:
    """Forged counts in two checkpoints of a root: the discovery and commit sensors' ticks end
    without sizing anything by them, and ask for their validation, whose findings say what is
    wrong."""
    import dagster as dg

    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors
    from orchestration.due import SensorState

    root = tmp_path / "root"
    stopped_copy(defaults["hdfs_agg"], root / "healthy", STOPPED)
    damage.edit_metadata(
        stopped_copy(defaults["hdfs_agg"], root / "forged", STOPPED),
        0,
        damage.declare_partitions(100_000_000),
    )
    damage.pin_shuffle(stopped_copy(defaults["hdfs_agg"], root / "pinned", STOPPED), "90000")
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="r", url=str(root))])
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources={"roots": roots})
        found = sensors.checkpoint_discovery_sensor(context)
        everyone = ["r:forged", "r:healthy", "r:pinned"]
        assert sorted(key for r in found.run_requests for key in checkpoints_of(r)) == everyone  # audited
        instance.add_dynamic_partitions("checkpoints", everyone)
        context = dg.build_sensor_context(instance=instance, resources={"roots": roots})
        # The look at the 90,000 stores "pinned" declares takes 5 s here, and past the look's
        # 10 s timeout on a loaded machine (then it is skipped this tick, as designed): what is
        # tested is what the tick asks for, not the clock.
        monkeypatch.setattr(sensors, "COMMIT_SENSOR_LOOK_TIMEOUT", 3600.0)
        result = sensors.checkpoint_commit_sensor(context)
        requested = {key for r in result.run_requests for key in checkpoints_of(r)}
        assert requested == set(everyone), result.run_requests  # each validated: its findings say it
        state = SensorState.from_json(result.cursor)
        assert set(state.seen) == set(everyone) and {"r:forged", "r:pinned"} <= set(state.validated)
