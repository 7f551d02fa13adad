"""The files that the partitions one plan decides at once in a process may hold in all.

On object stores a process decides several partitions at once, so that their requests overlap:
each holds its whole listing while it is decided, and a checkpoint's history grows its partitions.
Eight partitions of 41,000 files each once took a plan to 398 MB. So a partition starts (is
listed) only while the plan's partitions in hand, and the largest it has listed so far, fit in
`limit` files (before the first is listed, one at a time); and a page of a listing waits while
they hold `limit` files. The first partition in hand, in path order, never waits, so one of them
always ends and frees what it holds. A plan's process holds about `limit` files and one partition
more. Each plan counts its own: `ckpt fleet --plan` plans many checkpoints at once in one process,
and a plan stalled on a hung mount must not hold up another.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class HeldFiles:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, dict[str, int]] = {}  # plan -> its partition folders in hand -> files
        self._largest: dict[str, int] = {}  # plan -> the most files one of its partitions listed
        self._changed = threading.Condition()
        self._mine = threading.local()

    @contextmanager
    def deciding(self, plan: str, folder: str) -> Iterator[None]:
        """A partition of `plan` in hand, from its listing until it is decided and its listing
        freed: waits for room first."""
        with self._changed:
            held = self._held.setdefault(plan, {})
            while not self._first(held, folder) and not self._fits(held, self._largest.get(plan)):
                self._changed.wait()
            held[folder] = 0
        self._mine.where = (plan, folder)
        try:
            yield
        finally:
            self._mine.where = None
            with self._changed:
                files = held.pop(folder, 0)
                self._largest[plan] = max(self._largest.get(plan, 0), files)
                self._changed.notify_all()

    def forget(self, plan: str) -> None:
        """The plan is over (its pool too): what it learnt goes."""
        with self._changed:
            if not self._held.get(plan):
                self._held.pop(plan, None)
                self._largest.pop(plan, None)

    def take(self, files: int) -> None:
        """Files listed for the partition this thread decides: waits for room first. Outside
        `deciding` (a listing of something else, a test's own lister), nothing is counted."""
        where = getattr(self._mine, "where", None)
        if where is None:
            return
        plan, folder = where
        with self._changed:
            held = self._held[plan]
            while not self._first(held, folder) and not self._fits(held, files):
                self._changed.wait()
            held[folder] = held.get(folder, 0) + files

    def in_hand(self, plan: str) -> int:
        with self._changed:
            return sum(self._held.get(plan, {}).values())

    @staticmethod
    def _first(held: dict[str, int], folder: str) -> bool:
        return not held or folder <= min(held)

    def _fits(self, held: dict[str, int], more: int | None) -> bool:
        return more is not None and sum(held.values()) + more <= self.limit
