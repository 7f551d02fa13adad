"""Looks side by side within a deadline (`within_deadline`, under the commit sensor's ticks, the
fleet view and discovery) when looks hang."""

from __future__ import annotations

import math
import threading
import time

from checkpoint.model.discovery import within_deadline


def _looked(items: list[int], hung: set[int], workers: int) -> dict[int, int]:
    """`within_deadline` over `items` whose looks in `hung` never answer, timeout 0.2 s; run in a
    thread so that a call that never returns fails the test instead of hanging it."""
    release, result = threading.Event(), {}

    def look(item: int) -> int:
        if item in hung:
            release.wait(3600)
        return item

    def call() -> None:
        result.update(within_deadline(items, look, 30.0, workers, time.monotonic, 0.2, lambda i, t: -1))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(10)
    release.set()
    assert not caller.is_alive(), "the call did not return within 50 of its timeouts"
    return result


def test_two_hung_looks_in_a_row_are_both_passed() -> None:
    """The look started in place of an abandoned one was never timed out when it hung too: the
    wait for it had been set when no look was under way, without a bound, and the call (a commit
    sensor's tick, a fleet view) never returned."""
    for _ in range(5):  # the thread's start and its taking an item race the wait: a few times
        assert _looked([0, 1, 2, 3], {0, 1}, 1) == {0: -1, 1: -1, 2: 2, 3: 3}
    assert _looked(list(range(8)), {0, 1, 2, 3}, 2) == {0: -1, 1: -1, 2: -1, 3: -1, 4: 4, 5: 5, 6: 6, 7: 7}


def test_an_abandoned_look_sends_no_further_request(tmp_path) -> None:
    """A look past its timeout went on sending requests from its thread, beside the look started in
    its place (on a slow store, every tick's abandoned looks piled up). Its next request now raises
    `Abandoned` there, and the caller's own requests are untouched."""
    from checkpoint.errors import Abandoned
    from checkpoint.storage import Storage

    storage, raised = Storage(str(tmp_path)), []

    def look(item: int) -> int:
        try:
            while True:  # a store that answers, but too slowly for the look to end within the budget
                storage.stat("commits/0")
                time.sleep(0.01)
        except Abandoned as exc:
            raised.append(exc)
            raise

    got = within_deadline([0, 1], look, 0.1, 1, time.monotonic, 0.2, lambda i, t: -1)
    assert got == {0: -1}
    sent = storage.calls.total()
    time.sleep(0.3)  # ten of its requests' time
    assert storage.calls.total() == sent and sent > 0
    assert len(raised) == 1 and "stopped waiting" in str(raised[0])
    assert storage.stat("commits/0") is None  # this thread was never given up


def _answered_slowly(storage, requests: int, pause: float):
    """A look whose store answers each of its `requests` after `pause`: slow, never silent."""

    def look(item: int) -> int:
        for _ in range(requests):
            storage.stat("commits/0")
            time.sleep(pause)
        return item

    return look


def test_a_look_storage_keeps_answering_goes_on_past_its_timeout(tmp_path) -> None:
    """Every look bounded by its timeout whatever its progress: on a store too slow for a look's
    requests to fit in it (Azurite at 1,000 checkpoints), every look was abandoned, tick after
    tick, and none answered. Only silence gives a look up now; the budget still ends the call."""
    from checkpoint.storage import Storage

    look = _answered_slowly(Storage(str(tmp_path)), 20, 0.03)  # 0.6 s, an answer every 0.03 s
    assert within_deadline([0, 1], look, math.inf, 2, time.monotonic, 0.2, lambda i, t: -1) == {0: 0, 1: 1}
    began = time.monotonic()
    capped = within_deadline([0, 1, 2], look, 0.3, 1, time.monotonic, 0.2, lambda i, t: -1)
    assert capped == {0: -1} and time.monotonic() - began < 0.3 + 0.2 + 0.2  # the budget, a timeout


def test_no_look_starts_that_the_answered_ones_say_the_budget_would_cut(tmp_path) -> None:
    """On Azurite at 1,000 checkpoints, looks longer than the timeout were still started late in a
    tick and given up at its budget: half the tick's requests, for nothing. On a clock moved by the
    looks alone, each 0.3 s long and answered every 0.1 s (timeout 0.2 s, budget 1.0 s), the three
    that fit are answered and a fourth, which would end at 1.2 s, is not started."""
    from checkpoint.storage import Storage

    storage, now = Storage(str(tmp_path)), [0.0]

    def look(item: int) -> int:
        for _ in range(3):
            storage.stat("commits/0")
            now[0] += 0.1
        return item

    given_up: list[int] = []
    got = within_deadline(list(range(10)), look, 1.0, 1, lambda: now[0], 0.2, lambda i, t: given_up.append(i))
    assert (got, given_up, storage.calls.total()) == ({0: 0, 1: 1, 2: 2}, [], 9)
    # Looks shorter than the timeout are bounded by it alone, and go on to the budget.
    now[0] = 0.0
    short = within_deadline(list(range(10)), lambda i: now.__setitem__(0, now[0] + 0.15) or i, 1.0, 1,
                            lambda: now[0], 0.2, lambda i, t: -1)  # fmt: skip
    assert list(short) == list(range(7))


def test_a_look_that_reads_its_stores_in_a_pool_is_watched_there(tmp_path, monkeypatch) -> None:
    """A checkpoint of several stores is loaded in a pool of the look's own (`load_head`): the
    review found its requests went unseen there, so a look storage kept answering was given up
    as silent, and its pool went on sending requests after it was."""
    from checkpoint.model.head import load_head
    from checkpoint.storage import Storage
    from testbed import synthetic
    from tests.support.throttle import (
        StillUntilBegun,
        assert_stopped_with_its_look,
        noting_give_ups,
        throttled,
    )

    synthetic.build(tmp_path / "c", partitions=8, versions=6)
    reads = ("find", "ls", "stat", "cat_many", "cat", "cat_bounded", "heads")
    sent = throttled(monkeypatch, reads, at_once=2, pause=0.03)
    clock = StillUntilBegun()

    def look(_: int) -> int:
        clock.begun()
        return load_head(Storage(str(tmp_path / "c")), workers=8).latest_committed_batch

    began = time.monotonic()
    assert within_deadline([0], look, math.inf, 1, time.monotonic, 0.1, lambda i, t: -1) == {0: 5}
    assert time.monotonic() - began > 0.2  # answered past its timeout: slow, never silent
    gave_up: list[float] = []
    clock = StillUntilBegun()  # still until this look begins (the looks above ran it)
    assert within_deadline([0], look, 0.05, 1, clock, 0.1, noting_give_ups(gave_up)) == {0: -1}
    time.sleep(0.3)
    assert_stopped_with_its_look(sent, gave_up[0])


def test_a_look_that_raises_stops_the_other_threads() -> None:
    """A look's error is raised in the caller's thread; the other threads went on through every
    item left, sending requests, after the call had ended."""
    import pytest

    from checkpoint.storage import Storage

    storage = Storage(".")

    def look(item: int) -> int:
        if item == 0:
            time.sleep(0.05)
            raise ValueError("a bug in one look")
        storage.stat("no-such-file")
        time.sleep(0.01)
        return item

    with pytest.raises(ValueError, match="a bug in one look"):
        within_deadline(list(range(200)), look, math.inf, 4, time.monotonic, 1.0, lambda i, t: -1)
    sent = storage.calls.total()
    time.sleep(0.3)
    assert storage.calls.total() <= sent + 4  # those already past their check, at most one a thread
