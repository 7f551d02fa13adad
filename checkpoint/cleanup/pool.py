"""Deciding many partitions at once: threads on object stores (their requests overlap), worker
processes on local disks (deciding is Python work one core bounds), results in folder order."""

from __future__ import annotations

import functools
import gc
import logging
import multiprocessing
import os
import pickle
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from checkpoint.cleanup.decide import HELD, Context, Decided, Lister, decide_apart, decide_into, list_folder
from checkpoint.cleanup.spill import Spill
from checkpoint.policy import POLICY
from checkpoint.storage import Storage, carrying_watch

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


_QUEUED_PER_WORKER = 4
_worker_context: Context | None = None  # in a worker process: set once, by its initializer


def _start_worker(context: Context | str) -> None:
    """A worker's initializer: the context itself (forked) or the pickle file it was written to."""
    global _worker_context
    if isinstance(context, str):
        with open(context, "rb") as f:
            _worker_context = pickle.load(f)
    else:
        _worker_context = context
    gc.freeze()  # the context lives as long as the worker: no collection need ever walk it again


def _decide_in_worker(folders: tuple[str, ...]) -> tuple[list[Decided], Counter[str]]:
    """Partitions decided in a worker process (several at once, in threads, on object stores), with
    the storage calls they made: the worker's Storage is its own copy, and the plan's figures
    count every call."""
    if _worker_context is None:
        raise RuntimeError("a planning worker process was started without its context")
    calls = _worker_context.base.storage.calls
    before = calls.snapshot()
    # Deciding a partition makes a few objects per file, and frees them by reference count: none
    # form cycles. Collections triggered by that churn would walk the partition's listing again
    # and again (a tenth of a worker's time); they resume, and collect any cycle, once it is done.
    gc.disable()
    try:
        decide = functools.partial(decide_apart, _worker_context)
        if len(folders) == 1:
            decided = [decide(folders[0])]
        else:
            with ThreadPoolExecutor(len(folders)) as pool:
                decided = list(pool.map(decide, folders))
    finally:
        gc.enable()
    return decided, calls.snapshot() - before


def _counted(storage: Storage, result: tuple[list[Decided], Counter[str]]) -> list[Decided]:
    decided, calls = result
    for kind, n in calls.items():
        storage.calls.add(kind, n)
    return decided


def planning_workers(storage: Storage, partitions: int, lister: Lister | None = None) -> int:
    """Worker processes to decide partitions in: deciding is Python work that one core bounds,
    and so, on object stores, is what botocore spends per request (a listed object, a GET). The
    most to start, once a checkpoint has enough partitions (where they would be spawned on a local
    disk, `in_order` starts them only once the files left repay them); a lister given by a test
    stays in this process."""
    if lister not in (None, list_folder) or partitions < POLICY.plan_processes_from:
        return 0
    processes = min(POLICY.plan_processes, os.cpu_count() or 1)
    return processes if processes > 1 else 0


def partitions_at_once(storage: Storage, processes: int) -> int:
    """Partitions each process (or this one, without workers) decides at once: one on local disks,
    where a thread would only contend; on object stores enough, in threads, that `list_workers`
    partitions' requests are in flight in all, since a request's wait is latency, not CPU."""
    return -(-storage.width(POLICY.list_workers) // max(processes, 1))


def _process_pool(context: Context, workers: int) -> ProcessPoolExecutor:
    """Worker processes that hold the context. Forked when this process runs no other thread: a
    worker then starts in milliseconds with the context in its memory, where a spawned one
    imports this package and reads the context first (0.5 s of two cores at 1M files). A fork
    copies only the calling thread, so a lock another thread held (py4j's, Dagster's, a
    progress bar's, fsspec's event loop on object stores) would stay held in the child forever:
    with other threads, spawned. A spawned worker's Storage is rebuilt from its URL and options,
    with a client and event loop of its own."""
    if threading.active_count() == 1:
        # ProcessPoolExecutor forks every worker at the first submit, before its own threads start.
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_start_worker, initargs=(context,))  # fmt: skip
    # The context goes by a file, not as the initializer's argument: that would be written down
    # the pipe that starts each worker (a megabyte at 300 partitions), which blocks until the
    # child has imported this package, so workers would start one after another. The file is in
    # the plan's own temporary folder (private to this user), removed with it.
    context_file = os.path.join(context.spill_dir, "context.pickle")
    with open(context_file, "wb") as f:
        pickle.dump(context, f, protocol=pickle.HIGHEST_PROTOCOL)
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(context_file,))  # fmt: skip


def in_order(
    context: Context, folders: list[str], workers: int, spill: Spill, *, until_worth_it: bool = False
) -> Iterator[tuple[str, Decided]]:
    """Each partition folder decided, in folder order (see `_in_order`). `until_worth_it`: `workers`
    is the most to start. Where they would be spawned on a local disk, they start only once the
    partitions left, at the mean count of files of those decided so far, hold
    `plan_processes_from_files`; until then the partitions are decided in this process."""
    try:
        if until_worth_it and workers > 0 and _spawned_on_a_local_disk(context):
            done, files = 0, 0
            while done < len(folders) and not _worth_a_pool(files, done, len(folders) - done):
                # Its lines apart, as a pool's are: the spill puts those first, whichever way the rest goes.
                decided = decide_apart(context, folders[done])
                yield folders[done], decided
                done, files = done + 1, files + decided.listed
            folders = folders[done:]
        if folders:
            yield from _in_order(context, folders, workers, spill)
    finally:
        HELD.forget(context.spill_dir)


def _worth_a_pool(files: int, decided: int, left: int) -> bool:
    """Whether the partitions left hold `plan_processes_from_files` at the mean of those decided."""
    return decided > 0 and files * left >= POLICY.plan_processes_from_files * decided


def _spawned_on_a_local_disk(context: Context) -> bool:
    """Whether workers would be spawned (this process runs other threads: a Dagster run, a test's
    worker) on a local disk, where this process decides a partition at a time as fast as a worker
    does. A forked worker starts in milliseconds; on an object store this process would decide
    one partition at a time where the pool has several in flight."""
    return threading.active_count() > 1 and partitions_at_once(context.base.storage, 0) == 1


def _in_order(
    context: Context, folders: list[str], workers: int, spill: Spill
) -> Iterator[tuple[str, Decided]]:
    """Each partition folder decided (listed, read, decided), yielded in folder order: in
    `workers` worker processes (0: in this one), each deciding `partitions_at_once` at a time, so
    that many partitions are in memory in each. One at a time in this process, each goes
    straight to the spill. A failure fails the plan.

    A few units of work per worker are queued ahead (`_QUEUED_PER_WORKER`): a worker done with its
    partitions takes the next while an earlier one is still being decided, instead of idling
    until results are taken in order (1M files: 15.7 s with one queued per worker, 11.6 s with
    four). What decided partitions leave waiting is a few figures and their lines in files of
    their own."""
    storage = context.base.storage
    at_once = partitions_at_once(storage, workers)
    if workers < 1 and at_once == 1:
        yield from ((folder, decide_into(context, folder, spill.lines, spill.held)) for folder in folders)
        return
    pool: Executor
    work: Callable[[tuple[str, ...]], Any]
    take: Callable[[Any], list[Decided]]
    if workers < 1:  # threads of this process, a partition each
        pool, width, per_unit = ThreadPoolExecutor(at_once), at_once, 1
        work, take = carrying_watch(functools.partial(_decide_each, context)), _same
    else:  # each unit of work is what one worker process decides at once
        pool, width, per_unit = _process_pool(context, workers), workers, at_once
        work, take = _decide_in_worker, functools.partial(_counted, storage)
    units = [tuple(folders[i : i + per_unit]) for i in range(0, len(folders), per_unit)]
    with pool:
        window = width * _QUEUED_PER_WORKER
        ahead: deque[Future[Any]] = deque(pool.submit(work, unit) for unit in units[:window])
        try:
            for i, unit in enumerate(units):
                done = take(ahead.popleft().result())
                if i + window < len(units):
                    ahead.append(pool.submit(work, units[i + window]))
                yield from zip(unit, done, strict=True)
        finally:
            for waiting in ahead:
                waiting.cancel()


def _decide_each(context: Context, folders: tuple[str, ...]) -> list[Decided]:
    return [decide_apart(context, folder) for folder in folders]


def _same(decided: list[Decided]) -> list[Decided]:
    return decided
