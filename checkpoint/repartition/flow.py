"""The guarded flow of a repartition: preflight, a backup fork, the digests before, Spark's
rewrite, proof that every store holds the same rows where Spark's hash puts them, and the undo
when anything fails. Spark is reached through a small port (`StateEngine`, made only once
preflight passed); `jobs/repartition.py` is its Spark side."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from checkpoint.analysis import Severity, unproven_writer, validate
from checkpoint.errors import CheckpointError, LeaseLost, RepartitionFailed, RepartitionRefused
from checkpoint.fork import ForkOptions, fork_checkpoint
from checkpoint.format import StateAction
from checkpoint.model import Checkpoint, checkpoint_lineage, load_head
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report
from checkpoint.repartition.guards import (
    SUPPORTED_OPERATORS,
    Before,
    Preflight,
    StateReader,
    is_repartition_batch,
    partition_count,
    refuse_if_live,
    state_readers,
    undo,
)
from checkpoint.repartition.records import (
    REPARTITIONED,
    Records,
    RepartitionResult,
    Started,
    StoreDigest,
    StoreProof,
    Undone,
)
from checkpoint.safety import AuditTrail, InPlace, TwoSided, held_by
from checkpoint.storage import Storage

log = logging.getLogger(__name__)
_STEPS = 5  # preflight, backup, digests, rewrite, verification


class StateEngine(Protocol):
    """What the flow needs of Spark. Its calls raise what the engine raises (Py4J and analysis
    errors); the flow turns those into a refusal or an undo."""

    def digest(
        self, storage: Storage, batch: int, readers: list[StateReader], partitions: int, format_version: int
    ) -> list[StoreDigest]:
        """Every store's rows at `batch`, as its state data source reads them."""
        ...

    def rewrite(self, storage: Storage, partitions: int, format_version: int) -> None:
        """Spark's repartitioner: one new batch with the state in `partitions` partitions. Both
        run in a session of the checkpoint's format version, which Spark requires."""
        ...


class _Mismatch(Exception):
    pass


def first_line(exc: BaseException) -> str:
    """A Spark error's class and first line: its JVM stack trace is for the log, not the message."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def _no_engine(storage: Storage) -> StateEngine:
    raise RepartitionRefused("no state engine was given to repartition with")


@dataclass(frozen=True)
class RepartitionOptions:
    partitions: int  # the partition count to repartition to
    # Spark's repartitioner and reader on the checkpoint (`jobs.repartition.spark_engine` gives
    # it), made once preflight passed.
    engine: Callable[[Storage], StateEngine] = _no_engine
    quiet_seconds: float = POLICY.quiet_seconds
    what: str = "repartition"  # what the lease says it is held for
    now: float | None = None  # a manual clock; None: the time
    after_rewrite: Callable[[], None] | None = None  # between the rewrite and its proof (tests damage here)


def preflight(ckpt: Checkpoint, options: RepartitionOptions) -> Preflight:
    """The checks before anything is written; raises RepartitionRefused with the first that fails.

    `ckpt` is the head-first load of the latest batches (`head.load_head(recent=2)`).
    """
    partitions, quiet_seconds = options.partitions, options.quiet_seconds
    now = time.time() if options.now is None else options.now
    most = POLICY.max_state_partitions  # what a declaration may say (docs/safety.md)
    if not 1 <= partitions <= most:
        raise RepartitionRefused(f"--partitions must be 1 to {most:,}, not {partitions}: nothing was written",
                                 ckpt.url)  # fmt: skip
    if ckpt.operators:
        ckpt.states.refuse(StateAction.REPARTITION, ckpt.url)
    committed, planned = ckpt.latest_committed_batch, ckpt.latest_planned_batch
    if committed is None:
        raise RepartitionRefused("no committed batch: nothing to repartition yet", ckpt.url)
    resumes = None
    if planned is not None and planned > committed:
        if not is_repartition_batch(ckpt, planned):
            raise RepartitionRefused(
                f"batch {planned} has offsets but no commit: the query is running, or stopped mid-batch. "
                "Let it finish a batch (an availableNow run) and stop it, then repartition",
                ckpt.url,
            )
        pending = partition_count(ckpt, planned)
        if pending != partitions:
            raise RepartitionRefused(
                f"an interrupted repartition to {pending} partitions is batch {planned}: run it again with "
                f"--partitions {pending} to finish it, or with --undo to take it back",
                ckpt.url,
            )
        resumes = planned
    refuse_if_live(ckpt, now, quiet_seconds, own_batch=resumes)
    unsupported = {
        op: m.name for op, m in sorted(ckpt.operators.items()) if m.name not in SUPPORTED_OPERATORS
    }
    if unsupported:
        named = ", ".join(f"operator {op} ({name})" for op, name in unsupported.items())
        raise RepartitionRefused(f"Spark's repartitioner does not support {named}", ckpt.url)
    current = partition_count(ckpt, committed)
    if current == partitions and resumes is None:
        raise RepartitionRefused(f"the query already has {partitions} state partitions", ckpt.url)
    errors = [f for f in validate(ckpt).findings if f.severity == Severity.ERROR]
    if errors:
        raise RepartitionRefused(
            "validation has error findings: " + "; ".join(f"{f.code} {f.message}" for f in errors[:3]),
            ckpt.url,
        )
    for entry in checkpoint_lineage(ckpt, committed):
        why = unproven_writer(ckpt, entry)
        if why is not None:
            raise RepartitionRefused(f"{why}; a repartition writes the state with this release's Spark",
                                     ckpt.url)  # fmt: skip
    return Preflight(
        checkpoint=ckpt.url,
        latest_batch=committed,
        from_partitions=current,
        to_partitions=partitions,
        operators={op: str(m.name) for op, m in sorted(ckpt.operators.items())},
        resumes=resumes,
        format_version=ckpt.states.version,
    )


def repartition_checkpoint(request: InPlace, options: RepartitionOptions) -> RepartitionResult:
    """Repartitions the stopped query behind `request` under its lease, taken before anything is
    read (its `check` raises once it is lost).

    Refusals raise RepartitionRefused before anything is written; a failed rewrite or
    verification is undone and raises RepartitionFailed."""
    with request.held(options.what) as check:
        return _repartition(request.storage, request.audit_trail(), options, check)


def _repartition(
    storage: Storage, audit: AuditTrail, options: RepartitionOptions, check: Callable[[], None]
) -> RepartitionResult:
    # The time once the lease is held: a wait for it leaves no earlier clock behind.
    now = time.time() if options.now is None else options.now
    o = dataclasses.replace(options, now=now)
    partitions, quiet_seconds = o.partitions, o.quiet_seconds
    records = Records(audit, storage.url)
    seconds: dict[str, float] = {}
    t = time.monotonic()
    ckpt = load_head(storage, recent=2)
    last = records.latest()
    unfinished = last.started if last is not None and last.outcome is None else None
    if unfinished is not None and unfinished.to_partitions != partitions:
        raise RepartitionRefused(
            f"repartition {unfinished.repartition_id} to {unfinished.to_partitions} partitions did not "
            f"finish: run it again with --partitions {unfinished.to_partitions}, or --undo",
            storage.url,
        )
    if unfinished is not None and ckpt.latest_committed_batch == unfinished.batch:
        # Killed after Spark committed and before the proof: prove it now.
        refuse_if_live(ckpt, now, quiet_seconds, own_batch=unfinished.batch)
        pre = unfinished.preflight
    else:
        pre = preflight(ckpt, o)
    report(log, Progress("repartition steps", 1, _STEPS), "%s: %d -> %d partitions, batch %d", storage.url,
           pre.from_partitions, pre.to_partitions, pre.batch)  # fmt: skip
    readers = state_readers(ckpt)
    spark = o.engine(storage)
    seconds["preflight"] = time.monotonic() - t
    if unfinished is not None:
        started = unfinished
        before = records.before(started.repartition_id)
        log.info("%s: finishing repartition %s", storage.url, started.repartition_id)
    else:
        started, before = _start(spark, storage, audit, records, pre, readers, now, check, seconds)
    rid = started.repartition_id
    report(log, Progress("repartition steps", 3, _STEPS), "%s: %d stores digested", storage.url, len(readers))

    def fail(reason: str) -> RepartitionFailed:
        undone = undo(storage, before)
        records.finish(rid, Undone(storage.url, rid, reason, len(undone)))
        log.error("%s: repartition undone (%d files deleted): %s", storage.url, len(undone), reason)
        return RepartitionFailed(f"{reason}; the checkpoint is as it was before", storage.url)

    try:
        check()
        t = time.monotonic()
        if ckpt.latest_committed_batch != pre.batch:  # a killed run's batch Spark committed: proven below
            spark.rewrite(storage, partitions, pre.format_version)
        seconds["rewrite"] = time.monotonic() - t
        report(log, Progress("repartition steps", 4, _STEPS), "%s: Spark rewrote the state in %.1f s",
               storage.url, seconds["rewrite"])  # fmt: skip
        if o.after_rewrite is not None:
            o.after_rewrite()
        check()
        t = time.monotonic()
        stores = _verify(spark, storage, pre, readers, started.digests)
        seconds["verify"] = time.monotonic() - t
    except _Mismatch as exc:
        raise fail(str(exc)) from exc
    except LeaseLost:  # another holder may act now: this run touches nothing more
        raise
    except CheckpointError as exc:
        raise fail(f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # Spark's failure (a Py4J or analysis error): put the checkpoint back
        raise fail(f"Spark's rewrite failed: {first_line(exc)}") from exc
    result = RepartitionResult(storage.url, rid, REPARTITIONED, pre.from_partitions, pre.to_partitions,
                               pre.batch, started.backup, stores, seconds)  # fmt: skip
    records.finish(rid, result)
    report(log, Progress("repartition steps", 5, _STEPS), "%s: verified %d stores", storage.url, len(stores))
    return result


def _start(
    spark: StateEngine,
    storage: Storage,
    audit: AuditTrail,
    records: Records,
    pre: Preflight,
    readers: list[StateReader],
    now: float,
    check: Callable[[], None],
    seconds: dict[str, float],
) -> tuple[Started, Before]:
    """The listing before, the backup fork and the digests before, recorded before Spark writes."""
    t = time.monotonic()
    rid = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{pre.latest_batch}"
    before = Before.take(storage)
    records.write_before(rid, before)
    backup = audit.storage.child(records.rel(rid, "backup"))
    # Hard links where the audit trail shares the checkpoint's local file system: the backup then
    # costs no copy of the state, which Spark never rewrites in place.
    options = ForkOptions(batch=pre.latest_batch, link=True, what="repartition backup")
    forked = fork_checkpoint(TwoSided(storage, backup, held_by(check)), options)
    seconds["backup"] = time.monotonic() - t
    report(log, Progress("repartition steps", 2, _STEPS), "%s: backup fork at batch %d in %s "
           "(%d files, %d hard-linked)", storage.url, pre.latest_batch, backup.url, forked.files,
           forked.linked_files)  # fmt: skip
    t = time.monotonic()
    try:
        digests = spark.digest(storage, pre.latest_batch, readers, pre.from_partitions, pre.format_version)
    except Exception as exc:  # Spark fails with Py4J and analysis errors, not CheckpointErrors
        raise RepartitionRefused(f"Spark cannot read the state: {first_line(exc)}", storage.url) from exc
    off = next((d for d in digests if d.misplaced), None)
    if off is not None:  # nothing of the checkpoint is written yet; the backup stays in the audit trail
        raise RepartitionRefused(
            f"operator {off.operator} store {off.store}: {off.misplaced} rows sit outside the "
            "partition Spark's hash gives their key: this state is not partitioned as Spark's "
            "repartitioner assumes (a checkpoint from before Spark 3.3?)",
            storage.url,
        )
    started = Started(rid, storage.url, pre, pre.to_partitions, backup.url, forked.linked_files, digests)
    records.start(started)
    seconds["digest_before"] = time.monotonic() - t
    return started, before


def _verify(
    spark: StateEngine,
    storage: Storage,
    pre: Preflight,
    readers: list[StateReader],
    before: list[StoreDigest],
) -> list[StoreProof]:
    after_ckpt = load_head(storage, recent=1)
    if after_ckpt.latest_committed_batch != pre.batch or not is_repartition_batch(after_ckpt, pre.batch):
        raise _Mismatch(f"Spark did not commit repartition batch {pre.batch}")
    if partition_count(after_ckpt, pre.batch) != pre.to_partitions:
        raise _Mismatch(f"batch {pre.batch} does not have {pre.to_partitions} partitions")
    errors = [f for f in validate(after_ckpt).findings if f.severity == Severity.ERROR]
    if errors:
        raise _Mismatch(
            "validation after the rewrite: " + "; ".join(f"{f.code} {f.message}" for f in errors[:3])
        )
    after = spark.digest(storage, pre.batch, readers, pre.to_partitions, pre.format_version)
    stores = []
    for b, a in zip(before, after, strict=True):
        where = f"operator {a.operator} store {a.store}"
        if (b.rows, b.digest) != (a.rows, a.digest):
            raise _Mismatch(
                f"{where}: {b.rows} rows before, {a.rows} after, digests {b.digest} and {a.digest}"
            )
        if a.misplaced:
            raise _Mismatch(f"{where}: {a.misplaced} rows outside the partition Spark's hash gives them "
                            f"under {pre.to_partitions}")  # fmt: skip
        stores.append(StoreProof(a.operator, a.store, a.rows, 0, b.digest, a.digest))
    return stores


@dataclass(frozen=True)
class UndoOptions:
    quiet_seconds: float = POLICY.quiet_seconds
    query_stopped: bool = False  # the caller knows the query is stopped: no wait for the quiet period
    what: str = "repartition --undo"
    now: float | None = None  # a manual clock; None: the time


def undo_repartition(request: InPlace, options: UndoOptions) -> Undone:
    """`--undo`, under the lease of the checkpoint behind `request`: takes back the newest
    repartition while its batch is still the checkpoint's latest, and the query is not running. A
    query restarted after the repartition and idle since holds the next batch in its driver:
    undoing under it breaks that batch. So the undo waits for the repartition's own batch to be
    older than the quiet period, unless the caller knows the query is stopped (`query_stopped`)."""
    o = options
    with request.held(o.what) as check:
        return _undo_repartition(
            request.storage, request.audit_trail(), check, o.quiet_seconds, o.query_stopped, o.now
        )


def _undo_repartition(
    storage: Storage,
    audit: AuditTrail,
    check: Callable[[], None],
    quiet_seconds: float,
    query_stopped: bool,
    now: float | None,
) -> Undone:
    records = Records(audit, storage.url)
    last = records.latest()
    if last is None:
        raise RepartitionRefused("no repartition of this checkpoint in the audit trail", storage.url)
    started = last.started
    if last.taken_back:
        raise RepartitionRefused(f"repartition {started.repartition_id} was already undone", storage.url)
    ckpt = load_head(storage, recent=1)
    now = time.time() if now is None else now
    if not query_stopped and ckpt.is_live(now, quiet_seconds):
        raise RepartitionRefused(
            f"repartition batch {started.batch} is newer than the quiet period ({quiet_seconds:.0f} s): a "
            "query restarted since may be running and would break on its next batch. Stop it and wait, or "
            "pass --query-stopped if it is stopped",
            storage.url,
        )
    latest = max(b for b in (ckpt.latest_planned_batch, ckpt.latest_committed_batch) if b is not None)
    if latest > started.batch:
        raise RepartitionRefused(
            f"the query ran batch {latest} after repartition batch {started.batch}: undoing it now would "
            f"lose that progress (the backup fork at batch {started.preflight.latest_batch} is "
            f"{started.backup})",
            storage.url,
        )
    check()
    deleted = undo(storage, records.before(started.repartition_id))
    undone = Undone(storage.url, started.repartition_id, "undone on request", len(deleted))
    records.undo(undone)
    return undone
