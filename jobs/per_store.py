"""One Spark job of one task per store, several at once: the scheduler compaction and migration
share. A job per store is what keeps a task that dies (its Python worker killed by the OOM
killer, a segfault in RocksDB) from failing any store but its own.

Before each store starts, `check` runs on the driver (the leases': once it raises, nothing more may
be published), and no store starts after it raised. What else stops the rest is the caller's
policy: compaction goes on past a failed store, migration stops at the first. A Spark Connect
session starts no Python task of ours: there every store runs in this process, one after another.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from .spark_session import failure_line, first_line, hand_on_crash_spec, task_context

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class NotDone:
    """A store that failed, or was never started, and why in one line. `error` is what was raised
    on the driver (the check's, or the store's when it ran here); None when the task said why or
    died."""

    reason: str
    started: bool
    seconds: float = 0.0
    error: BaseException | None = None


class Where(Enum):
    """Where a store runs when Spark's tasks are at hand."""

    TASK = "a Spark task of its own"
    DRIVER = "this process, the driver"  # it needs the driver's JVM (Spark's own provider)


@dataclass(frozen=True)
class PerStore(Generic[T, R]):
    """How each store is run.

    `in_task` runs in the store's Spark task, given `ship(store)`: a result, or a `str` that says
    why the store failed (an exception would come back inside the JVM's stack trace). `here` runs
    the store in this process: under Spark Connect, and for a store `runs` puts on the driver (the
    HDFS-backed store's snapshot needs the driver's JVM); what it raises fails the store."""

    in_task: Callable[[Any], R | str]
    here: Callable[[T], R]
    describe: Callable[[T], str]
    ship: Callable[[T], Any] = lambda store: store
    runs: Callable[[T], Where] = lambda store: Where.TASK
    instead: str = "the stores run in this process, one after another"


def each_store(
    spark: Any,
    stores: Sequence[T],
    how: PerStore[T, R],
    *,
    check: Callable[[T], None],
    stop_on_failure: bool,
) -> Iterator[tuple[T, R | NotDone]]:
    """(store, what it gave or why not) for every store, in the order given, as many at once as
    the cluster has cores. A failure never raises here: the caller words it."""
    if not stores:
        return
    sc = task_context(spark, how.instead)
    stop: list[str] = []

    def one(store: T) -> R | NotDone:
        if stop:
            return NotDone(f"not started: {stop[0]}", started=False)
        try:
            check(store)
        except Exception as exc:  # noqa: BLE001 - the lease is lost: nothing more may be published
            stop.append(str(exc))
            return NotDone(f"not started: {exc}", started=False, error=exc)
        started = time.monotonic()
        out = _run(sc, store, how, started)
        if isinstance(out, NotDone) and stop_on_failure:
            stop.append(f"{how.describe(store)} failed")
        return out

    workers = max(1, min(len(stores), sc.defaultParallelism if sc is not None else 1))
    with ThreadPoolExecutor(workers) as pool:
        yield from zip(stores, pool.map(one, stores), strict=True)


def _run(sc: Any, store: T, how: PerStore[T, R], started: float) -> R | NotDone:
    if sc is None or how.runs(store) is Where.DRIVER:
        try:
            return how.here(store)
        except Exception as exc:  # noqa: BLE001 - a RocksDB, JVM or I/O failure fails this store
            return NotDone(failure_line(exc), started=True, seconds=time.monotonic() - started, error=exc)
    sc.setJobDescription(how.describe(store))
    hand_on_crash_spec(sc)
    try:
        out = sc.parallelize([how.ship(store)], 1).map(how.in_task).collect()[0]
    except Exception as exc:  # noqa: BLE001 - the task itself died: this store's job failed alone
        return NotDone(f"the Spark task died: {first_line(exc)}", True, time.monotonic() - started)
    if isinstance(out, str):
        return NotDone(out, started=True, seconds=time.monotonic() - started)
    return out
