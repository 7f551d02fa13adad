"""`jobs.per_store`, the scheduler compaction and migration share, alone: a job per store, a store
failing alone, `check` stopping what has not started, and the two policies on a failure. Under
Spark Connect (a session without a SparkContext on this side) the stores run here, in order."""

from __future__ import annotations

import os

from jobs.per_store import NotDone, PerStore, Where, each_store


class _ConnectSession:
    """What a Spark Connect session shows this side: no `sparkContext` (it raises there)."""


def _here(store: int) -> int:
    if store == 3:
        raise OSError("No space left on device")
    return store * 10


def _in_task(store: int) -> int | str:
    if store == 3:
        return "store 3: the chain is broken"  # a task says why it failed, as a string
    if store == 4:
        os._exit(137)  # the Python worker killed (the OOM killer, a segfault in RocksDB)
    return store * 10


def _unleased(store: int) -> None:
    """No lease here: the scheduler alone."""


def _how(**more) -> PerStore:
    return PerStore(in_task=_in_task, here=_here, describe=lambda s: f"store {s}", **more)


def test_without_a_spark_context_each_store_runs_here_and_fails_alone() -> None:
    got = dict(each_store(_ConnectSession(), [1, 2, 3, 5], _how(), check=_unleased, stop_on_failure=False))
    assert [got[s] for s in (1, 2, 5)] == [10, 20, 50]
    failed = got[3]
    assert isinstance(failed, NotDone) and failed.started and "No space left on device" in failed.reason
    assert isinstance(failed.error, OSError)


def test_a_failure_stops_what_follows_when_the_caller_says_so() -> None:
    """Migration's policy: after the first failure no store starts, and each says why."""
    got = list(each_store(_ConnectSession(), [1, 3, 5, 6], _how(), check=_unleased, stop_on_failure=True))
    assert [s for s, _ in got] == [1, 3, 5, 6]  # the order given
    assert got[0][1] == 10 and isinstance(got[1][1], NotDone)
    for _, out in got[2:]:
        assert isinstance(out, NotDone) and not out.started and out.reason == "not started: store 3 failed"


def test_a_check_that_raises_starts_nothing_more() -> None:
    """The leases' check: once it raised (the lease was taken over), no store starts."""
    ran = []

    def check(store: int) -> None:
        if store == 2:
            raise RuntimeError("the lease was taken over")
        ran.append(store)

    got = dict(each_store(_ConnectSession(), [1, 2, 5], _how(), check=check, stop_on_failure=False))
    assert got[1] == 10 and ran == [1]
    for store in (2, 5):
        assert isinstance(got[store], NotDone) and not got[store].started
        assert "the lease was taken over" in got[store].reason
    assert isinstance(got[2].error, RuntimeError)
    assert not list(each_store(_ConnectSession(), [], _how(), check=_unleased, stop_on_failure=False))


def test_in_spark_each_store_is_its_own_job_and_a_dead_task_fails_its_store_alone(spark) -> None:
    """A task that returns why it failed, and one whose Python worker dies, fail their stores; the
    others, and the store named to run on the driver, give their results."""
    how = _how(runs=lambda s: Where.DRIVER if s == 6 else Where.TASK)
    got = dict(each_store(spark, [1, 3, 4, 5, 6], how, check=_unleased, stop_on_failure=False))
    assert [got[s] for s in (1, 5, 6)] == [10, 50, 60]
    assert isinstance(got[3], NotDone) and got[3].reason == "store 3: the chain is broken"
    assert isinstance(got[4], NotDone) and got[4].reason.startswith("the Spark task died")
