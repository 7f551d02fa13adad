"""Finding checkpoints under a root, at any depth, with shallow listings that stop at each checkpoint.

A folder is a checkpoint when it holds a query `metadata` file beside an `offsets/` or `commits/`
folder. The walk never descends into a checkpoint (so never into its `state/`): requests grow with
the folders above the checkpoints, not with their files. Folders are listed concurrently.
"""

from __future__ import annotations

import itertools
import logging
import math
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from checkpoint.errors import NotACheckpointError, StorageError
from checkpoint.format import AUDIT_FOLDER
from checkpoint.model.checkpoint import Checkpoint
from checkpoint.model.head import load_head
from checkpoint.policy import POLICY
from checkpoint.storage import Folder, Storage, Watch, watch_requests

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class FoundCheckpoint:
    rel: str  # the folder relative to the root ("" when the root is a checkpoint)
    url: str

    def load(self, root: Storage, *, strict: bool = True, **head: Any) -> Checkpoint:
        """Head-first: the logs and what recovery reads (see checkpoint.model.head)."""
        return load_head(root.child(self.rel), strict=strict, **head)


def is_checkpoint(listing: Folder, rel: str) -> bool:
    names = {f.rel for f in listing.files}
    logs = {f"{rel}/{d}" if rel else d for d in ("offsets", "commits")}
    return (f"{rel}/metadata" if rel else "metadata") in names and bool(logs & set(listing.folders))


def _found(listing: Folder, rel: str) -> bool:
    """A checkpoint, or one that lost its `metadata` (both logs there): found, so that validation
    says so (QUERY_METADATA_MISSING) where a fleet is looked at, not only where a path is given.
    The actions that take a folder for a checkpoint by itself (retirement) keep `is_checkpoint`."""
    logs = {f"{rel}/{d}" if rel else d for d in ("offsets", "commits")}
    return is_checkpoint(listing, rel) or logs <= set(listing.folders)


def find_checkpoints(
    root: Storage, workers: int = POLICY.list_workers, timeout: float = POLICY.look_timeout_seconds
) -> list[FoundCheckpoint]:
    """Every checkpoint folder under the root, the root itself included, in path order.

    A root that does not exist or cannot be listed raises: an outage is not an empty fleet. So does
    a folder whose listing has not answered within `look_timeout` (a stalled mount): its
    checkpoints must not look vanished.
    """
    top = root.list_dir("")
    if not top.exists:
        raise NotACheckpointError("no such directory", root.url)
    found: list[str] = []
    level = [("", top)]
    while level:
        below: list[str] = []
        for rel, listing in level:
            if _found(listing, rel):
                found.append(rel)
            else:
                # The audit trail holds this tool's own copies (a repartition's backup fork):
                # records, never checkpoints to maintain.
                below += [f for f in listing.folders if f.rsplit("/", 1)[-1] != AUDIT_FOLDER]
        listed = within_deadline(
            below, root.list_dir, math.inf, workers, time.monotonic, timeout, _unanswered
        )
        level = []
        for folder, answer in zip(below, listed.values(), strict=True):
            if answer is None:
                raise StorageError(f"the listing of {folder} did not answer within {timeout:g} s", root.url)
            level.append((folder, answer))
    log.info("%s: %d checkpoints found in %d requests", root.url, len(found), root.calls.total())
    return [FoundCheckpoint(r, f"{root.url}/{r}" if r else root.url) for r in sorted(found)]


def _unanswered(folder: str, timeout: float) -> Folder | None:
    return None


def scan(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Storage, list[FoundCheckpoint]]:
    storage = Storage(url, storage_options)
    return storage, find_checkpoints(storage)


def within_deadline(
    items: Sequence[T],
    look: Callable[[T], R],
    budget: float,
    workers: int,
    clock: Callable[[], float],
    timeout: float,
    timed_out: Callable[[T, float], R],
) -> dict[int, R]:
    """{index of an item: what `look` gave}, for a prefix of `items`: `workers` threads take the
    items in order, none once `budget` seconds have passed.

    A look is abandoned to its thread, and answered by `timed_out(item, timeout)`, when storage has
    not answered it for `timeout` seconds (a hung mount, a store that stopped answering), or when it
    has run `timeout` seconds and the budget has passed; a new thread goes on in its place, and the
    abandoned look sends no further storage request (its next one raises `Abandoned`). A look that
    storage keeps answering, slowly, goes on within the budget: when every look was bounded by
    `timeout` whatever its progress, a store too slow for one look's requests to fit in it (a
    throttled or overloaded store, Azurite at 1,000 checkpoints) had every look abandoned, tick
    after tick, and none answered. The call ends within `budget` and one `timeout` after it.

    No look is started that the looks answered so far say would be given up at the budget: one
    longer than `timeout` that would end past it. On Azurite at 1,000 checkpoints, the looks
    started late in a tick were cut there, and were half the tick's requests. The guess is their
    average: a call whose first looks were long starts no more past the budget less that average,
    even where the items left would be quick (each call begins with `workers` looks, whatever
    the guess, so a sensor's next tick goes on from where this one stopped).

    Daemon threads (an executor would wait for an abandoned one at exit), each taking its next
    item itself, so a look costs a lock and a queue, not a hand-off."""
    start = clock()
    lock = threading.Lock()
    following = 0
    # thread -> (the item it looks at, since when, when storage last answered it, its requests then)
    current: dict[int, tuple[int, float, float, int]] = {}
    watches: dict[int, Watch] = {}
    answers: queue.SimpleQueue[tuple[int | None, Any]] = queue.SimpleQueue()
    answered = [0.0, 0.0]  # looks answered, and their seconds in all

    def worth_starting(now: float) -> bool:
        """Against the looks answered so far: one of their average length, started now, ends
        before `overdue` would give it up though storage kept answering."""
        if now - start >= budget:
            return False
        if not answered[0]:
            return True
        expected = answered[1] / answered[0]
        return expected <= timeout or now + expected <= start + budget

    def worker(me: int, watch: Watch) -> None:
        nonlocal following
        watch_requests(watch)
        while True:
            with lock:
                if watch.given_up.is_set():
                    return
                now = clock()
                if following >= len(items) or not worth_starting(now):
                    answers.put((None, me))  # done
                    return
                i, following = following, following + 1
                current[me] = (i, now, now, watch.sent)
            try:
                answer: Any = look(items[i])
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
                answer = exc
            with lock:
                if watch.given_up.is_set():
                    return
                answered[0] += 1
                answered[1] += clock() - current.pop(me)[1]
                answers.put((i, answer))

    def overdue(now: float) -> float | None:
        """Gives up the looks past their bounds, a new thread for each, and says when the next bound
        falls (None: no look under way). A request sent since the last call means the one before it
        was answered."""
        due = None
        with lock:
            for me, (i, since, heard, sent) in list(current.items()):
                if watches[me].sent != sent:
                    heard, sent = now, watches[me].sent
                    current[me] = (i, since, heard, sent)
                ends = min(heard + timeout, max(since + timeout, start + budget))
                if now >= ends:
                    watches[me].given_up.set()
                    running.discard(me)
                    del current[me]
                    got[i] = timed_out(items[i], timeout)
                    spawn()
                else:
                    due = ends if due is None else min(due, ends)
        return due

    running: set[int] = set()
    names = itertools.count()

    def spawn() -> None:
        me = next(names)
        running.add(me)
        watches[me] = Watch()
        threading.Thread(target=worker, args=(me, watches[me]), name="ckpt-look", daemon=True).start()

    for _ in range(max(1, min(workers, len(items)))):
        spawn()
    got: dict[int, R] = {}
    try:
        while running:
            now = clock()
            due = overdue(now)
            # Woken a few times a timeout to see which looks are being answered. With no look under
            # way yet (a thread just started has not taken its item) the wait is bounded too:
            # unbounded, a look that thread went on to make and that hung was never timed out, and
            # the call never returned (two hung checkpoints in a row, one look at a time).
            wait = timeout / 4 if due is None else min(timeout / 4, max(0.0, due - now))
            try:
                i, answer = answers.get(timeout=wait)
            except queue.Empty:
                continue
            if i is None:
                running.discard(answer)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                got[i] = answer
    finally:
        # Raised by a look (or interrupted): the other threads take no further item and send no
        # further request, where before they went on through every item left.
        with lock:
            for watch in watches.values():
                watch.given_up.set()
    return dict(sorted(got.items()))


def each_checkpoint(
    look: Callable[[T], R],
    items: Sequence[T],
    *,
    width: int,
    timed_out: Callable[[T, float], R] | None = None,
    timeout: float = POLICY.look_timeout_seconds,
) -> list[R]:
    """`look` at every item (one checkpoint each), the results in the items' order. `width`: the
    looks worth having in flight at once (`Storage.width` of `fleet_workers`); `timeout`: how long
    storage may leave one unanswered (`Storage.look_timeout`).

    On object stores a look is round trips: `width` threads. On local disks it is Python
    work one core bounds, and threads only contend (10,000 checkpoints: 25-35 s in 16 threads,
    13 s in one): one after another in this thread, and from `fleet_processes_from` items in
    worker processes, one a core. `look` and the items then travel by pickle (a module-level
    function, plain values). The workers are forked when this process runs no other thread; with
    others, a fork could copy a lock one of them holds, so they are spawned (they import this
    package first: a second or so)."""
    processes = min(POLICY.plan_processes, os.cpu_count() or 1)
    if timed_out is not None and (width > 1 or processes < 2 or len(items) < POLICY.fleet_processes_from):
        # In threads, each look given up after `timeout` without an answer from storage: a
        # checkpoint that hangs is one row `timed_out` makes, and the others go on (a worker
        # process is not abandoned so). With no budget, a look storage keeps answering runs to
        # its end, however slowly.
        done = within_deadline(items, look, math.inf, width, time.monotonic, timeout, timed_out)
        return list(done.values())
    if width > 1:
        with ThreadPoolExecutor(max(1, min(width, len(items)))) as threads:
            return list(threads.map(look, items))
    if processes < 2 or len(items) < POLICY.fleet_processes_from:
        return list(map(look, items))
    method = "fork" if threading.active_count() == 1 else "spawn"
    pool: Executor = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(method))
    with pool:
        # Chunks of a few dozen: a result's pickle costs less than a round trip per item, and
        # workers that finish early take more.
        return list(pool.map(look, items, chunksize=max(1, len(items) // (processes * 16))))
