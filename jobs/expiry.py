"""The Spark side of the purge of expired state: one Spark job of one task per store
(`jobs.per_store`), as compaction runs its rebuilds, on local mode or any master. The driver plans
(the lease, the preflight, the purge time) and ships each task its store: the checkpoint narrowed
to that store's files and its lineage (`checkpoint.expiry.StoreTask`). The task rebuilds the store,
evicts what expired, checks the result and publishes it through the checkpoint's storage, and
gives back the store's figures.

A failed store stops the stores not yet started (the lease's check or a store's failure): the
purge is then incomplete, each store purged or not, and the same purge run again purges the rest,
as it does after a kill."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from checkpoint.crash import crash_point
from checkpoint.errors import CorruptFileError, PurgeIncomplete
from checkpoint.progress import Progress, report

from .per_store import NotDone, PerStore, each_store
from .spark_session import failure_line, task_crash_point

if TYPE_CHECKING:
    from checkpoint.expiry import StorePurge, StorePurges, StoreTask

log = logging.getLogger(__name__)


def spark_purges(session: Callable[[], Any]) -> StorePurges:
    """The purge's `run` port on `session()` (started when the first store is due)."""

    def run(tasks: list[StoreTask], check: Callable[[], None]) -> list[StorePurge]:
        return run_purge_tasks(session(), tasks, check) if tasks else []

    return run


def run_purge_tasks(spark: Any, tasks: list[StoreTask], check: Callable[[], None]) -> list[StorePurge]:
    """Each store purged in a Spark task of its own, side by side; the lease's `check` on the
    driver before each store starts. Raises PurgeIncomplete naming the first failure (or the
    check's own LeaseLost) once the stores already running have ended: what they published
    stays, and the same purge run again finishes the rest."""

    def describe(task: StoreTask) -> str:
        s = task.entry.store
        return f"purge expired state {task.ckpt.url} op {s.operator} part {s.partition} {s.store}"

    how: PerStore[StoreTask, StorePurge] = PerStore(
        in_task=_purge_in_task, here=lambda task: task.purge(), describe=describe,
        instead="the stores are purged in this process, one after another",
    )  # fmt: skip
    done: list[StorePurge] = []
    failed: list[tuple[StoreTask, NotDone]] = []
    for task, out in each_store(spark, tasks, how, check=lambda _: check(), stop_on_failure=True):
        if isinstance(out, NotDone):
            failed.append((task, out))
            continue
        done.append(out)
        progress = Progress("stores purged", len(done), len(tasks))
        report(log, progress, "%d of %d stores purged", progress.done, progress.total)
        crash_point("purge.after_store", len(done))
    if failed:
        task, why = next(((t, w) for t, w in failed if w.started), failed[0])
        if why.error is not None and not why.started:
            raise why.error  # the lease lost before a store: its own error, as the CLI and Dagster word it
        if why.reason.startswith(DAMAGED) or isinstance(why.error, CorruptFileError):  # a rerun stops there
            then = ("the others are as they were, and the same purge finishes them once that file is "
                    "restored (ckpt validate --deep checks every file against its sidecar)")  # fmt: skip
        else:
            then = "run the same purge again to finish it"
        raise PurgeIncomplete(f"{task.entry.store}: {why.reason}; {len(done)} of {len(tasks)} stores "
                              f"purged: {then}", task.ckpt.url)  # fmt: skip
    return done


DAMAGED = "a file it reads is damaged: "


def _purge_in_task(task: StoreTask) -> StorePurge | str:
    task_crash_point("purge.task", task.entry.store)
    try:
        return task.purge()
    except CorruptFileError as exc:
        return DAMAGED + failure_line(exc)
    except Exception as exc:  # noqa: BLE001 - a RocksDB, JVM or I/O failure fails this store alone
        return failure_line(exc)
