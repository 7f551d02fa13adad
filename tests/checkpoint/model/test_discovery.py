"""Looks side by side within a deadline (`within_deadline`, under the commit sensor's ticks, the
fleet view and discovery) when looks hang."""

from __future__ import annotations

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
