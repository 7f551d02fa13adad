"""A local disk made an overloaded store: each request of the named backend calls waits its turn
among `at_once` and then `pause` seconds, as a throttled object store answers looks in flight."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple


class Sent(NamedTuple):
    at: float  # when the backend was asked
    thread: int
    watched: bool  # counted in a look's watch (checkpoint.storage.current_watch)


def throttled(monkeypatch, names: tuple[str, ...], at_once: int, pause: float) -> list[Sent]:
    """Slows `LocalBackend`'s calls in `names` for the test; returns each request as it was asked,
    appended as it is (a request after a look was given up shows there)."""
    from checkpoint.errors import Abandoned
    from checkpoint.storage import current_watch, local

    sent: list[Sent] = []
    slots = threading.Semaphore(at_once)

    def slowed(fn):
        def wrapped(*args, **kwargs):
            asked = Sent(time.monotonic(), threading.get_ident(), current_watch() is not None)
            sent.append(asked)
            with slots:
                time.sleep(pause)
            try:
                return fn(*args, **kwargs)
            except Abandoned:
                # A download is counted (and refused) inside the backend, after it was asked
                # here: refused, it was never sent.
                sent.remove(asked)
                raise

        return wrapped

    for name in names:
        monkeypatch.setattr(local.LocalBackend, name, slowed(getattr(local.LocalBackend, name)))
    return sent


class StillUntilBegun:
    """A clock for `within_deadline` that stands at its start until a look calls `begun()`, then
    runs: a budget of a few milliseconds is past only once the look is under way. With the real
    clock, a loaded machine started the look's thread after such a budget had passed, so no look
    began and the call answered nothing."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.running = False

    def begun(self) -> None:
        self.running = True

    def __call__(self) -> float:
        return time.monotonic() if self.running else self.start


def noting_give_ups(gave_up: list[float]):
    """A `timed_out` for `within_deadline` that answers -1 and notes when the look was given up
    (it runs as the look is given up)."""

    def timed_out(item, timeout: float) -> int:
        gave_up.append(time.monotonic())
        return -1

    return timed_out


def assert_stopped_with_its_look(sent: list[Sent], given_up: float) -> None:
    """Every request was counted in the look's watch, its pool's too; after the look was given up
    (at `given_up`, taken in the call's `timed_out`, which runs as the look is given up), only
    those already past their check went out, at most one a thread. A time bound instead failed
    on a loaded machine, where a thread that passed its check before the look was given up may
    be descheduled for tens of milliseconds before it asks the backend."""
    assert all(s.watched for s in sent), "a request the look's watch did not see"
    late = [s.thread for s in sent if s.at > given_up]
    assert len(set(late)) == len(late), f"a thread went on sending after its look was given up: {late}"
