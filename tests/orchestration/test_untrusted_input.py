"""The orchestrator's input is input too (docs/safety.md): the commit sensor goes on past a FIFO
or a device in a commit log and past a look that hangs, and a hostile cursor (truncated, of
another type, a run of 10^10, a zip bomb, too many keys, from the future) starts an empty state
and says so, never postponing a validation; the registry of queries to rehearse is a JSON object
of names, and anything else is one error naming its variable."""

from __future__ import annotations

import base64
import json
import time
import zlib

import dagster as dg
import pytest

from orchestration.due import MAX_CURSOR_BYTES, MAX_CURSOR_KEYS, SensorState
from tests.support.damage import IN_THE_COMMIT_LOG, newest_commit, root_with_a_bad_checkpoint


@pytest.mark.parametrize("which", sorted(IN_THE_COMMIT_LOG))
def test_the_commit_sensor_goes_on_past_a_fifo_and_a_device(corpus, tmp_path, which) -> None:
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors

    root = root_with_a_bad_checkpoint(corpus, tmp_path, IN_THE_COMMIT_LOG[which][0])
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(root))])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["f:bad", "f:healthy"])
        ctx = dg.build_sensor_context(instance=instance, resources={"roots": roots})
        result = sensors.checkpoint_commit_sensor(ctx)
        cursor = result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor
        assert set(SensorState.from_json(cursor).seen) == {"f:bad", "f:healthy"}


def test_a_look_that_hangs_is_abandoned_and_the_next_one_made() -> None:
    """A look that never answers (a hung NFS read): reported at its timeout, the next one made."""
    from orchestration import sensors

    def look(key: str):
        if key == "a":
            time.sleep(3600)
        return sensors.Look(7)

    looks = sensors.look_within(["a", "b"], look, budget=30, workers=1, look_timeout=0.5)
    assert looks["a"].problem and "timed out" in looks["a"].problem and looks["b"].latest == 7


def _packed(body: dict) -> str:
    return "z1:" + base64.b64encode(zlib.compress(json.dumps(body).encode(), 9)).decode()


MANY = MAX_CURSOR_KEYS + 1
GOOD = SensorState(seen={"r:a": 4, "r:b": 9}, validated={"r:a": 1000.0}, unvalidated={"r:b": 900.0}).to_json()
HOSTILE = {
    "truncated": GOOD[: len(GOOD) // 2],
    "a list": "[1]",
    "a number": "5",
    "a run of 10^10": _packed({"keys": [0, "r:a"], "seen": [1, 10**10], "validated": [None, 1],
                               "unvalidated": [None, 1], "crossings": {}, "urgent": [], "next_key": ""}),
    "a bomb": "z1:" + base64.b64encode(zlib.compress(b" " * (MAX_CURSOR_BYTES + 10), 9)).decode(),
    "too many keys": _packed({"keys": [0, "k"] + [1, ""] * MAX_CURSOR_KEYS, "seen": [1, MANY],
                              "validated": [None, MANY], "unvalidated": [None, MANY], "crossings": {},
                              "urgent": [], "next_key": ""}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_cursor_starts_an_empty_state_and_says_so(name) -> None:
    state, problem = SensorState.read(HOSTILE[name], now=2000.0)
    assert state == SensorState() and problem and "empty state" in problem


def test_a_cursor_from_the_future_cannot_postpone_validation() -> None:
    future = SensorState(seen={"r:a": 4}, validated={"r:a": 1e12}, unvalidated={"r:a": 1e12},
                         crossings={"r:a": 1e12}).to_json()  # fmt: skip
    state, problem = SensorState.read(future, now=5000.0)
    assert (
        problem is None
        and state.validated["r:a"] == state.unvalidated["r:a"] == state.crossings["r:a"] == 5000
    )


def test_the_sensor_survives_each_hostile_cursor(copy_of, tmp_path) -> None:
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors

    path = copy_of("snapshots")
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(path.parent))])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [f"f:{path.name}"])
        for name, cursor in HOSTILE.items():
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            result = sensors.checkpoint_commit_sensor(ctx)
            new = result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor
            assert SensorState.from_json(new).seen == {f"f:{path.name}": newest_commit(path)}, name


@pytest.mark.unit
def test_the_registry_is_a_json_object_of_names(monkeypatch) -> None:
    from checkpoint.errors import CheckpointError
    from orchestration.rehearsal import QUERIES_ENV, RegisteredQuery, queries_from_env

    monkeypatch.delenv(QUERIES_ENV, raising=False)
    assert queries_from_env() == {}
    monkeypatch.setenv(
        QUERIES_ENV, '{"a": "m:f", "b": {"query": "m:g", "python": "/py", "conf": {"k": "v"}}}'
    )
    assert queries_from_env() == {"a": RegisteredQuery("m:f"), "b": RegisteredQuery("m:g", "/py", {"k": "v"})}
    for bad in ('["m:f"]', "{", '{"a": {"code": "x"}}'):
        monkeypatch.setenv(QUERIES_ENV, bad)
        with pytest.raises(CheckpointError, match=QUERIES_ENV):
            queries_from_env()
