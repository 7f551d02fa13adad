"""Looks side by side within a deadline (`within_deadline`, under the commit sensor's ticks and the
fleet view) against a store that answers slowly."""

from __future__ import annotations

import threading
import time

from checkpoint.model.discovery import within_deadline


class _SlowStore:
    """A store that serves one request at a time, each in `seconds` (an emulator, or throttling):
    the more looks at once, the longer each takes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.serving = threading.Lock()
        self.in_flight = self.most = 0
        self.counting = threading.Lock()

    def look(self, item: int, requests: int = 5) -> int:
        with self.counting:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            for _ in range(requests):
                with self.serving:
                    time.sleep(self.seconds)
            return item
        finally:
            with self.counting:
                self.in_flight -= 1


def test_looks_that_time_out_on_a_slow_store_narrow_the_width_until_they_are_answered() -> None:
    """Eight looks at once of five requests each take 0.4 s here, past the 0.25 s timeout: at full
    width every look timed out, and the abandoned ones, still loading the store, made the next
    worse. The width halves at a timeout, and the looks after it are answered."""
    store = _SlowStore(0.01)
    done = within_deadline(list(range(400)), store.look, 3.0, 8, time.monotonic, 0.25, lambda i, t: -1)
    answered = [i for i, got in done.items() if got == i]
    timed_out = [i for i, got in done.items() if got == -1]
    assert timed_out, "the first looks at full width time out"
    assert len(answered) >= 20 and len(answered) > 2 * len(timed_out), (len(answered), len(timed_out))
    assert list(done) == list(range(len(done)))  # a prefix of the items, as the next tick expects
    assert store.most <= 8 + 8  # the abandoned looks of one wave, and no more than a width beside them


def test_a_hung_look_keeps_one_thread_going_on() -> None:
    """One look at a time, one that never answers: passed at its timeout, and the next made."""
    release = threading.Event()

    def look(item: int) -> int:
        if item == 0:
            release.wait(3600)
        return item

    try:
        done = within_deadline([0, 1, 2], look, 30.0, 1, time.monotonic, 0.2, lambda i, t: -1)
    finally:
        release.set()
    assert done == {0: -1, 1: 1, 2: 2}
