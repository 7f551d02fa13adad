"""A local disk made an overloaded store: each request of the named backend calls waits its turn
among `at_once` and then `pause` seconds, as a throttled object store answers looks in flight."""

from __future__ import annotations

import threading
import time


def throttled(monkeypatch, names: tuple[str, ...], at_once: int, pause: float) -> list[float]:
    """Slows `LocalBackend`'s calls in `names` for the test; returns the times each was asked,
    appended as they are (a request after a look was given up shows there)."""
    from checkpoint.storage import local

    sent: list[float] = []
    slots = threading.Semaphore(at_once)

    def slowed(fn):
        def wrapped(*args, **kwargs):
            sent.append(time.monotonic())
            with slots:
                time.sleep(pause)
            return fn(*args, **kwargs)

        return wrapped

    for name in names:
        monkeypatch.setattr(local.LocalBackend, name, slowed(getattr(local.LocalBackend, name)))
    return sent
