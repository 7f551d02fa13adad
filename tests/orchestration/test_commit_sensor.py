"""The commit sensor asks for runs only for work that is due, and never more than the fleet takes.

The decision (orchestration/due.py) is driven on a manual clock; the real sensor ticks over 200
synthetic checkpoints (real naming) that all commit between ticks, against a real Dagster instance
whose queue holds real runs.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster import DagsterRunStatus
from dagster._core.storage.dagster_run import DagsterRun

from orchestration.due import Caps, Look, SensorState, plan_tick
from orchestration.queue import Kind, run_tags
from testbed import fleet, synthetic
from tests.support.runs import batches_of

CAPS = Caps(
    max_runs_per_tick=5, max_queued_per_job=3, validation_period_seconds=900, max_per_validation_run=50
)
NOTHING_QUEUED = {"compact": 0, "validate": 0}


def _new(latest: int, crossing: bool = False, error: bool = False) -> Look:
    return Look(latest, new=True, crossing=crossing, error=error)


def _tick(state: SensorState, looks: dict[str, Look], now: float, queued=NOTHING_QUEUED, compacting=()):
    return plan_tick(state, looks, now, CAPS, queued, set(compacting))


def test_validation_at_most_once_per_period_unless_an_error_shows() -> None:
    looks = {"a": _new(1), "b": _new(1)}
    first = plan_tick(SensorState(), looks, 1000.0, CAPS, NOTHING_QUEUED, set())
    assert first.validate == (("a", "b"),) and first.compact == ()  # one run for both
    later = plan_tick(
        first.state, {"a": _new(2), "b": _new(2, error=True)}, 1060.0, CAPS, NOTHING_QUEUED, set()
    )
    assert later.validate == (("b",),)  # a waits for its period; b's new batch shows an error: now
    idle = plan_tick(later.state, {"a": Look(2), "b": Look(2)}, 1500.0, CAPS, NOTHING_QUEUED, set())
    assert idle.validate == () and idle.compact == ()
    due = plan_tick(idle.state, {"a": Look(2), "b": Look(2)}, 1000.0 + 900, CAPS, NOTHING_QUEUED, set())
    assert due.validate == (("a",),)  # its commit of 1060 is validated once the period has passed
    assert (
        plan_tick(due.state, {"a": Look(2), "b": Look(2)}, 9999.0, CAPS, NOTHING_QUEUED, set()).validate == ()
    )


def test_crossings_are_served_oldest_first_and_none_is_dropped_while_the_queue_is_full() -> None:
    state, looks = SensorState(), {k: Look(5) for k in "abcd"}
    for t, key in enumerate(["c", "a", "d", "b"]):  # crossing in this order
        state = _tick(state, {**looks, key: _new(5, crossing=True)}, 100.0 + t, {"compact": 3}).state
    full = _tick(state, looks, 200.0, {"compact": 3})
    assert full.compact == ()
    assert "4 compaction(s) wait" in full.waiting and "3 of 3 were queued" in full.waiting
    one_free = _tick(full.state, looks, 201.0, {"compact": 2})
    assert one_free.compact == ((("c", 5),),)  # the oldest crossing, and only as many as the queue takes
    rest = _tick(one_free.state, looks, 202.0, compacting={"d"})
    assert rest.compact == ((("a", 5),), (("b", 5),))  # d's compaction is running already: no second one
    assert rest.state.crossings == {}


def test_the_caps_bound_every_tick() -> None:
    looks = {f"q{i:03d}": _new(1, crossing=i < 4) for i in range(200)}
    plan = _tick(SensorState(), looks, 0.0)
    assert len(plan.compact) == 3  # the compaction queue's room (3), under the tick's cap (5)
    assert len(plan.validate) == 2 and all(len(run) == 50 for run in plan.validate)  # 5 - 3 runs left
    assert "97 checkpoint(s) wait for validation" in plan.waiting and "1 compaction(s) wait" in plan.waiting


def test_due_compactions_are_gathered_into_runs_of_many_checkpoints() -> None:
    """40 checkpoints cross within a minute: four runs of ten, not forty runs. A lone crossing
    waits for the window, then goes alone; a full run's worth goes at once."""
    caps = dataclasses.replace(
        CAPS, max_per_compaction_run=10, compaction_gather_seconds=120, max_queued_per_job=8
    )
    looks = {f"q{i:02d}": Look(5) for i in range(40)}
    state, runs = SensorState(), []
    for t in range(40):  # one more crossing every 1.5 s
        key = f"q{t:02d}"
        plan = plan_tick(
            state, {**looks, key: _new(5, crossing=True)}, 100.0 + 1.5 * t, caps, NOTHING_QUEUED, set()
        )
        state, runs = plan.state, runs + list(plan.compact)
    assert [len(run) for run in runs] == [10, 10, 10, 10]
    assert [k for run in runs for k, _ in run] == [f"q{i:02d}" for i in range(40)]  # oldest first

    lone = plan_tick(SensorState(), {"a": _new(7, crossing=True)}, 1000.0, caps, NOTHING_QUEUED, set())
    assert lone.compact == () and "1 compaction(s) gathering" in lone.waiting
    assert plan_tick(lone.state, {"a": Look(7)}, 1119.0, caps, NOTHING_QUEUED, set()).compact == ()
    assert plan_tick(lone.state, {"a": Look(7)}, 1120.0, caps, NOTHING_QUEUED, set()).compact == (
        (("a", 7),),
    )
    # 16 cross in one tick: a run of 10 at once; the 6 left over gather on, from their own oldest
    burst = {f"b{i:02d}": _new(7, crossing=True) for i in range(16)}
    first = plan_tick(SensorState(), burst, 2000.0, caps, NOTHING_QUEUED, set())
    assert [len(r) for r in first.compact] == [10] and "6 compaction(s) gathering" in first.waiting
    more = {f"c{i}": _new(7, crossing=True) for i in range(3)}  # three more, a minute later
    idle = {k: Look(7) for k in [*burst, *more]}
    later = plan_tick(first.state, {**idle, **more}, 2060.0, caps, NOTHING_QUEUED, set())
    assert later.compact == () and "9 compaction(s) gathering" in later.waiting
    last = plan_tick(later.state, idle, 2120.0, caps, NOTHING_QUEUED, set())
    assert [len(r) for r in last.compact] == [9]  # the window of the oldest left over has passed


def test_a_checkpoint_discovery_audited_is_not_validated_again_at_first_sight() -> None:
    looks = {"audited": _new(3), "fresh": _new(3), "broken": _new(3, error=True)}
    first = plan_tick(
        SensorState(), looks, 1000.0, CAPS, NOTHING_QUEUED, set(), audited={"audited", "broken"}
    )
    assert first.validate == (("broken", "fresh"),)  # an error is validated at once, audited or not
    assert first.state.validated["audited"] == 1000.0 and "audited" not in first.state.unvalidated
    # Its next commit is a commit like any other: validated once the period has passed.
    later = plan_tick(first.state, {"audited": _new(4)}, 1000.0 + 900, CAPS, NOTHING_QUEUED, set(),
                      audited={"audited"})  # fmt: skip
    assert later.validate == (("audited",),)


def _fleet(root: Path, count: int, versions: dict[str, int], crossing: set[str]) -> None:
    """Every checkpoint at its version: a snapshot every 5 versions keeps chains short, except
    for the `crossing` ones, which never snapshot (their chain is the whole lineage)."""
    for i in range(count):
        name = f"q{i:03d}"
        every = 1000 if name in crossing else 5
        synthetic.write_local(root / name, synthetic.files(1, versions[name], window=3, snapshot_every=every))


def _queue_runs(instance: dg.DagsterInstance, kind: Kind, count: int, bulk: bool = False) -> None:
    # Created and not yet launched: a QUEUED run would need the code location's origin to be made.
    for _ in range(count):
        tags = {**run_tags(kind), **({"ckpt/bulk": "true"} if bulk else {})}
        run = DagsterRun(job_name="maintain_checkpoints", run_id=str(uuid.uuid4()),
                         status=DagsterRunStatus.NOT_STARTED, tags=tags)  # fmt: skip
        instance.add_run(run)


@pytest.mark.slow
def test_200_committing_checkpoints_get_runs_only_for_what_is_due(tmp_path, no_gathering) -> None:
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors
    from orchestration.jobs import validate_checkpoints_job
    from orchestration.validation import validation_request

    names = [f"q{i:03d}" for i in range(200)]
    crossing = {"q007", "q100", "q199"}
    versions = {n: 9 for n in names}  # chains of 4, or of 8 for the three: none crosses 10 yet
    _fleet(tmp_path, 200, versions, crossing)
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(tmp_path))])
    keys = [f"f:{n}" for n in names]

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", keys)

        def tick(cursor):
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            result = sensors.checkpoint_commit_sensor(ctx)
            cursors.append(result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor)
            return result

        cursors: list[str | None] = []
        # Discovery's run audited the first half, executed by Dagster: the sensor's first round
        # validates the other half only, in one run.
        audited = validation_request(keys[:100], "discovered").run_config
        done = validate_checkpoints_job.execute_in_process(run_config=audited, instance=instance,
                                                           resources={"roots": roots})  # fmt: skip
        assert done.success
        # An audit tick's bulk runs wait behind their limit of one: they take none of the room
        # the sensor has for its own validation runs.
        _queue_runs(instance, Kind.VALIDATION, 19, bulk=True)
        first = tick(None)
        assert batches_of(first, "validation") == [keys[100:]]
        assert len(first.run_requests) == 1
        assert "ckpt/bulk" not in first.run_requests[0].tags  # of checkpoints that wrote: not held back

        _fleet(tmp_path, 200, {n: 12 for n in names}, crossing)  # every one commits; three cross
        second = tick(first.cursor)
        assert batches_of(second) == [sorted(f"f:{n}" for n in crossing)]  # one run, one Spark application
        assert len(second.run_requests) == 1  # the others were validated less than a period ago
        assert second.run_requests[0].run_config["ops"]["maintain_each"]["config"]["clean"] is False

        idle = tick(second.cursor)
        assert isinstance(idle, dg.SkipReason) and "0 new commit(s)" in str(idle.skip_message)

        for old in (tmp_path / "q050").rglob("*.zip*"):
            old.unlink()  # q050 loses its snapshots: its chain now reaches back to version 1 ...
        _fleet(tmp_path, 200, {n: 13 for n in names}, {"q050", *crossing})
        _queue_runs(instance, Kind.MAINTENANCE, 40)  # a schedule's runs hold no room of the sensor's
        _queue_runs(instance, Kind.COMPACTION, sensors.SENSOR_CAPS.max_queued_per_job)
        full = tick(second.cursor)  # ... but the compaction queue is full
        assert isinstance(full, dg.SkipReason)
        assert "wait for room in the queue" in str(full.skip_message)
        waiting = SensorState.from_json(cursors[-1]).crossings
        assert set(waiting) >= {"f:q050"}  # kept, to be served oldest first once there is room
        instance.delete_run(instance.get_runs(limit=1)[0].run_id)  # room for one
        served = tick(cursors[-1])
        assert [r.job_name for r in served.run_requests] == ["maintain_checkpoints"]
        assert "f:q050" in batches_of(served)[0]


class _Clock:
    """A manual clock that a look advances, as a look's round trips would."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_tick_starts_no_look_once_its_budget_is_spent() -> None:
    from orchestration.sensors import look_within

    clock = _Clock()

    def look(key: str) -> Look:
        clock.now += 1.0  # every look costs a second
        return Look(1)

    order = [f"k{i:03d}" for i in range(100)]
    looks = look_within(order, look, budget=10.0, workers=1, clock=clock)
    assert list(looks) == order[:10] and clock.now == 10.0  # a prefix, and no look past the budget
    clock.now = 0.0
    wide = look_within(order, look, budget=10.0, workers=4, clock=clock)
    assert list(wide) == order[: len(wide)] and 10 <= len(wide) <= 10 + 4


def test_every_checkpoint_is_looked_at_within_its_bound_and_due_work_is_found() -> None:
    """1,000 checkpoints, 70 looks a tick: each is looked at within ceil(1000 / 70) = 15 ticks,
    however many were added meanwhile, and a crossing is requested at its first look."""
    from orchestration.due import looking_order, resume_at

    keys = [f"r:q{i:04d}" for i in range(1000)]
    state, last_look, worst = SensorState(), {}, 0
    crossing = "r:q0777"
    requested_at = None
    for tick in range(40):
        if tick == 20:
            added = [f"r:new{i:02d}" for i in range(30)]  # onboarded meanwhile, before the round's place
            keys += added
            last_look.update(dict.fromkeys(added, tick - 1))
        order = looking_order(keys, state)
        looked = order[:70]
        looks = {k: _new(1 + tick, crossing=(k == crossing and tick >= 3)) for k in looked}
        plan = plan_tick(state, looks, 1000.0 * tick, CAPS, NOTHING_QUEUED, set(), keys=keys,
                         next_key=resume_at(order, len(looked)))  # fmt: skip
        if requested_at is None and any(k == crossing for run in plan.compact for k, _ in run):
            requested_at = tick
        for k in looked:
            worst = max(worst, tick - last_look.get(k, -1))
            last_look[k] = tick
        state = plan.state
    assert worst <= -(-len(keys) // 70) and set(last_look) == set(keys)
    assert requested_at is not None and requested_at <= 3 + 15


def test_the_cursor_stays_small_at_10000_checkpoints_and_an_old_one_is_read() -> None:
    keys = [f"prod:team-{i % 37:02d}/query-{i:05d}" for i in range(10_000)]
    state = SensorState(
        seen={k: 100_000 + i * 7 % 5000 for i, k in enumerate(keys)},
        validated={k: 1_790_000_000.123 + (i // 500) * 60 for i, k in enumerate(keys)},
        unvalidated={k: 1_790_000_900.0 for k in keys[:300]},
        crossings={k: 1_790_000_950.0 for k in keys[:10]},
        urgent=keys[:3],
        next_key=keys[4000],
    )
    cursor = state.to_json()
    assert len(cursor) <= 64 * 1024, len(cursor)
    back = SensorState.from_json(cursor)
    assert back.seen == state.seen and back.next_key == keys[4000] and back.crossings == state.crossings
    # What the release before this one wrote: plain JSON, read, then replaced by a packed one.
    old = json.dumps(
        {"seen": {"a": 3}, "validated": {"a": 1.5}, "unvalidated": {}, "crossings": {}, "urgent": []}
    )
    read = SensorState.from_json(old)
    assert read.seen == {"a": 3} and read.validated == {"a": 1.5}
    assert read.to_json().startswith("z1:")
    assert SensorState.from_json(json.dumps({"a": 3})).seen == {"a": 3}  # and the one before that


@pytest.mark.stress
def test_10000_checkpoints_every_tick_within_its_budget_and_every_due_compaction_requested(
    monkeypatch, no_gathering
) -> None:
    """The fleet of issue 49 on a local disk (`testbed.fleet`): 10,000 checkpoints, every one new to
    the sensor, a 3 s budget. Discovery asks for 20 audit runs, not 10,000. No tick runs past its
    budget by more than a margin (the looks in flight and the cursor's packing). Twelve
    checkpoints, spread over the fleet, carry a chain past the threshold: each is requested within
    the ticks a round takes plus those the caps need to serve twelve, whatever the validation runs
    ask for meanwhile."""
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors

    budget, margin, count, crossing = 3.0, 4.0, fleet.COUNT, fleet.CROSSING
    monkeypatch.setattr(sensors, "COMMIT_SENSOR_BUDGET", budget)
    assert len(crossing) == 12
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(fleet.ensure_fleet()))])

    with dg.instance_for_test() as instance:
        found = sensors.checkpoint_discovery_sensor(
            dg.build_sensor_context(instance=instance, resources={"roots": roots})
        )
        keys = instance.get_dynamic_partitions("checkpoints")  # added by the tick itself, at once
        assert len(keys) == count and len(found.run_requests) == 20
        assert not found.dynamic_partitions_requests

        cursor, spans, requested, ticks, round_ticks = None, [], {}, 0, None
        while (len(requested) < len(crossing) or round_ticks is None) and ticks < 60:
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            began = time.monotonic()
            result = sensors.checkpoint_commit_sensor(ctx)
            spans.append(time.monotonic() - began)
            cursor = result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor
            ticks += 1
            if round_ticks is None and len(SensorState.from_json(cursor).seen) == count:
                round_ticks = ticks  # every checkpoint looked at once
            for run in batches_of(result):
                for key in run:
                    requested.setdefault(key.split("/", 1)[1], ticks)
        assert max(spans) <= budget + margin, spans
        assert round_ticks is not None and round_ticks >= 2, (ticks, spans)  # the budget cut the round
        # A crossing is found at its first look, within the round, and requested as the compaction
        # queue's cap lets: twelve at 8 a tick take two more ticks at most.
        cap = sensors.SENSOR_CAPS.max_queued_per_job
        bound = round_ticks + -(-len(crossing) // cap)
        assert set(requested) == crossing and max(requested.values()) <= bound, (
            requested,
            round_ticks,
            spans,
        )
        assert len(cursor or "") <= 64 * 1024


def test_a_refusal_the_newest_logs_alone_would_give_is_told_from_every_log(corpus, tmp_path) -> None:
    """A new commit's look plans compaction from the logs a restart reads. A refusal there is told
    from every retained log, as the compaction run reads them: after a repartition a few batches
    ago, the operator metadata's count is only an older batch's, and the long chain is still
    requested, not sent to validation as an error."""
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors
    from testbed.copying import copy_checkpoint
    from tests.support import damage

    damage.widened_lately(copy_checkpoint(corpus["long_chain"], tmp_path / "q"))
    root = CheckpointRoot(name="f", url=str(tmp_path))
    roots = CheckpointRootsResource(roots=[root], long_chain_threshold=2)
    look = sensors._look(roots, "f:q", None, {"f": roots.storage("f")}, quiet_since=0.0)
    assert (look.new, look.crossing, look.error, look.problem) == (True, True, False, None)
