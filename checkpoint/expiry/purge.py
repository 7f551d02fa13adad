"""Expired transformWithState state: reported, and purged offline from a stopped query.

Spark evicts what a TTL expired only while the query runs, at the end of each batch. A query
stopped for a week recovers every value that expired meanwhile, holds it in RocksDB, and spends
its first batch deleting it. The purge does that eviction ahead of the restart: each store of a
transformWithState operator is rebuilt at the latest committed batch (compaction's rebuild: the
base zip, its changelogs replayed, the result verified), the entries expired at the purge time are
taken out of every family that holds them (`checkpoint.expiry.ttl`), the result is read again and
must hold nothing expired with every index in step, and it is published as that version's
snapshot under a free name. Spark would hide those entries from `get()` and delete them in the
restart's first batch anyway, as a restart's batch time is later than the purge's.

Guarded as compaction is, and more: the query must be stopped (no batch planned and not committed,
nothing written within the quiet period), the purge time no later than now, the checkpoint free of
error findings and written by a Spark whose snapshots are proven, under the checkpoint's lease
(checked before each store). A store whose version is its own snapshot already is left as it is:
its name is taken, and nothing is overwritten. Its expired entries are reported, and Spark evicts
them. Each purge is recorded in the audit trail. A purge killed part-way leaves each store purged or
not; run again, it purges the rest.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoint import bounds
from checkpoint.analysis import Severity, ValidationOptions, unproven_writer, validate
from checkpoint.compaction import Rewrite, Rewritten, rewrite_store
from checkpoint.crash import crash_point
from checkpoint.errors import CheckpointError, PurgeRefused, RebuildError, StorageError
from checkpoint.expiry.ttl import Expired, TtlVariable, expired_in, ttl_variables
from checkpoint.format import FileKind, SnapshotMetadata, StateAction
from checkpoint.model import Checkpoint, StoreLineage, checkpoint_lineage, load_head
from checkpoint.policy import POLICY, Policy, duration_text
from checkpoint.rocksdb import (
    bulk_options,
    fetch_base,
    merge_delimiter,
    open_db,
    set_options,
    write_in_batches,
)
from checkpoint.safety import InPlace, folder_name
from checkpoint.storage import Storage

PURGED, NOTHING, OWN_SNAPSHOT, LOOKED = "purged", "nothing expired", "its own snapshot", "looked"
log = logging.getLogger(__name__)

_BATCH = 50_000


# Purges the stores given, the lease's `check` before each starts, and gives each one's outcome in
# order; raises when one fails (RebuildError in this process, PurgeIncomplete from Spark's tasks,
# LeaseLost), after what finished is published. In this process (`in_this_process`), or one Spark
# task a store (`jobs.expiry`).
StorePurges = Callable[["list[StoreTask]", Callable[[], None]], "list[StorePurge]"]


@dataclass(frozen=True)
class PurgeOptions:
    as_of: float | None = None  # seconds since the epoch; None: now (mid-batch: the batch's own time)
    quiet_seconds: float = POLICY.quiet_seconds
    now: float | None = None  # a manual clock; None: the time
    policy: Policy = POLICY  # the rebuild's memory and disk bounds
    what: str = "purge-expired"  # what the lease says it is held for
    run: StorePurges | None = None  # None: `in_this_process`


@dataclass(frozen=True)
class StorePurge:
    """One store: its variables with a TTL as found, and what became of it (`outcome`)."""

    operator: int
    partition: int
    store: str
    version: int
    variables: tuple[Expired, ...]
    outcome: str
    path: str | None = None  # the snapshot published
    keys: int | None = None  # its key count

    @property
    def expired(self) -> int:
        return sum(v.expired for v in self.variables)

    def as_dict(self) -> dict[str, Any]:
        return {"operator": self.operator, "partition": self.partition, "store": self.store,
                "version": self.version, "outcome": self.outcome, "expired": self.expired,
                "expired_bytes": sum(v.expired_bytes for v in self.variables),
                "entries": sum(v.entries for v in self.variables), "path": self.path, "keys": self.keys,
                "variables": [v.as_dict() for v in self.variables]}  # fmt: skip


@dataclass(frozen=True)
class ExpiredState:
    """What expired at `as_of_ms` in a checkpoint's transformWithState stores at `batch`, each
    store's outcome: reported (`looked`), or purged."""

    url: str
    batch: int | None
    as_of_ms: int
    stores: tuple[StorePurge, ...]
    seconds: float
    # The batch planned and not committed (a query stopped mid-batch, or a running one's) that a
    # restart replays as of its own time: the purge is never later than it, nor by default a report.
    # None for a query stopped after its last batch.
    replays: int | None = None

    def as_dict(self) -> dict[str, Any]:
        entries = sum(v.entries for s in self.stores for v in s.variables)
        expired = sum(s.expired for s in self.stores)
        gone = sum(v.expired_bytes for s in self.stores for v in s.variables)
        return {"url": self.url, "batch": self.batch, "as_of_ms": self.as_of_ms, "entries": entries,
                "expired": expired, "expired_bytes": gone,
                "expired_share": round(expired / entries, 4) if entries else 0.0,
                "purged": sum(s.outcome == PURGED for s in self.stores), "seconds": self.seconds,
                "replays": self.replays, "stores": [s.as_dict() for s in self.stores]}  # fmt: skip


def expired_report(storage: Storage, options: PurgeOptions = PurgeOptions()) -> ExpiredState:
    """What a purge with `options` would take: what has expired, as of `as_of` (default now, never
    later; for a batch planned and not committed, its own time), in every transformWithState store
    with a TTL at the latest committed batch. Reads what a recovery of that batch reads, a store at
    a time; writes nothing and takes no lease, so a running query is reported too."""
    as_of, policy = options.as_of, options.policy
    now = time.time() if options.now is None else options.now
    if as_of is not None:
        try:
            bounds.instant(as_of, "the report's time")
        except bounds.OutOfRange as exc:
            raise PurgeRefused(f"{exc}; nothing was read", storage.url) from exc
        if as_of > now:
            raise PurgeRefused(f"the report's time {_utc(as_of)} is later than now ({_utc(now)}): what "
                               "expires later is not expired to Spark", storage.url)  # fmt: skip
    started = time.monotonic()
    ckpt = load_head(storage, strict=False, recent=2)
    # A batch planned and not committed (a query stopped mid-batch, or one running) evicts as of its
    # own time: by default the report is what that batch, or a purge, takes.
    planned = ckpt.batches.get(ckpt.latest_planned_batch or 0) if ckpt.unfinished else None
    replays = planned.id if planned is not None and planned.offset is not None else None
    as_of_ms = (
        _replay_time(ckpt, replays)
        if replays is not None and as_of is None
        else _ms(now if as_of is None else as_of)
    )
    if replays is not None and as_of_ms > _replay_time(ckpt, replays):
        replays = None  # asked for later than the replay evicts: not what a purge would take
    batch = ckpt.latest_committed_batch
    stores = tuple(_look(ckpt.for_store(e.store), e, props, as_of_ms, policy) for e, props in _targets(ckpt))
    return ExpiredState(ckpt.url, batch, as_of_ms, stores, round(time.monotonic() - started, 3), replays)


def purge_expired(request: InPlace, options: PurgeOptions) -> ExpiredState:
    """The purge's door: the checkpoint's lease, the preflight, then each store purged (see the
    module docstring). Raises PurgeRefused before anything is written.

    A query stopped mid-batch (batch N planned, its commit never written: a processing-time TTL
    query asks for a batch at every trigger, so that is how it usually stops) is purged as its
    replay of N will see it: as of N's own time, which the offset log records and the replay
    reuses. N evicts exactly that, and nothing more; a later purge time is refused."""
    started = time.monotonic()
    audit, policy = request.audit_trail(), options.policy
    now = time.time() if options.now is None else options.now
    try:
        bounds.instant(now, "now")
        bounds.seconds(options.quiet_seconds, "the quiet period")
        if options.as_of is not None:
            bounds.instant(options.as_of, "the purge time")
    except bounds.OutOfRange as exc:
        raise PurgeRefused(f"{exc}; nothing was written", request.storage.url) from exc
    if options.as_of is not None and options.as_of > now:
        raise PurgeRefused(f"the purge time {_utc(options.as_of)} is later than now ({_utc(now)}): a "
                           "restart's first batch could come before it and still see what it would remove; "
                           "nothing was written", request.storage.url)  # fmt: skip
    # The record is written into the trail, never into the checkpoint: the door refuses a trail
    # inside it.
    with request.held(options.what) as check:
        ckpt = load_head(request.storage, strict=False, recent=2)
        replays = _preflight(ckpt, now, options.quiet_seconds)
        as_of_ms = _purge_time(ckpt, replays, options.as_of, now)
        targets = _targets(ckpt)
        for entry, _ in targets:
            why = unproven_writer(ckpt, entry)
            if why is not None:
                raise PurgeRefused(f"refused: {why}. Nothing was written", ckpt.url)
        tasks = [
            StoreTask(ckpt.for_store(entry.store), entry, props, as_of_ms, policy) for entry, props in targets
        ]
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}Z"
        rel = f"{folder_name(ckpt.url)}/purges/{stamp}.json"
        # Recorded as begun before any store is touched: a trail that cannot be written refuses the
        # purge with nothing done, and a purge killed part-way leaves its record of what it began.
        begun = {"at": time.time(), "outcome": "begun", "url": ckpt.url, "as_of_ms": as_of_ms,
                 "stores": [str(entry.store) for entry, _ in targets]}  # fmt: skip
        try:
            audit.storage.write(rel, json.dumps(begun, indent=1).encode())
        except (StorageError, OSError) as exc:
            raise PurgeRefused(f"the audit trail cannot be written ({exc}); nothing was purged",
                               ckpt.url) from exc  # fmt: skip
        try:
            done = (options.run or in_this_process)(tasks, check)
        except CheckpointError as exc:  # stopped part-way, or Spark never started: the record says so
            ended = {**begun, "at": time.time(), "outcome": "stopped", "why": str(exc)}
            try:
                audit.storage.write(rel, json.dumps(ended, indent=1).encode())
            except (StorageError, OSError):
                log.warning("%s: the purge's record could not be ended; it still says begun", ckpt.url)
            raise
    result = ExpiredState(ckpt.url, ckpt.latest_committed_batch, as_of_ms, tuple(done),
                          round(time.monotonic() - started, 3), replays)  # fmt: skip
    audit.storage.write(rel, json.dumps({"at": time.time(), **result.as_dict()}, indent=1).encode())
    return result


def _purge_time(ckpt: Checkpoint, replays: int | None, as_of: float | None, now: float) -> int:
    """The purge time in milliseconds: the one asked for (no later than now, checked before), by
    default now; for a query stopped mid-batch, batch N's own time, and never later than it, as
    the replay of N evicts as of that time and reads what expires after it."""
    if replays is None:
        return _ms(now if as_of is None else as_of)
    own = _replay_time(ckpt, replays)
    if as_of is not None and _ms(as_of) > own:
        raise PurgeRefused(f"refused: the purge time {_utc(as_of)} is later than batch {replays}'s own "
                           f"time ({_utc(own / 1000)}), which its replay evicts by: what expires between the "
                           "two is still read by that batch; nothing was written", ckpt.url)  # fmt: skip
    return own if as_of is None else _ms(as_of)


def _replay_time(ckpt: Checkpoint, replays: int) -> int:
    entry = ckpt.batches[replays].offset
    assert entry is not None  # an unfinished batch is a planned one: its offset file was read
    return entry.batch_timestamp_ms


@dataclass(frozen=True)
class StoreTask:
    """One store's purge, as plain values a Spark task can be shipped: the checkpoint narrowed to
    the store, its lineage at the latest committed batch, its operator's properties (which name its
    state variables), the purge time and the rebuild's bounds."""

    ckpt: Checkpoint
    entry: StoreLineage
    props: dict[str, Any] | None
    as_of_ms: int
    policy: Policy

    def purge(self) -> StorePurge:
        return _purge(self.ckpt, self.entry, self.props, self.as_of_ms, self.policy)


def in_this_process(tasks: list[StoreTask], check: Callable[[], None]) -> list[StorePurge]:
    """The stores purged one after another in this process, the lease checked before each: the
    `StorePurges` port without Spark (`jobs.expiry` runs each store as a Spark task)."""
    done = []
    for i, task in enumerate(tasks, 1):
        check()
        done.append(task.purge())
        crash_point("purge.after_store", i)
    return done


def _preflight(ckpt: Checkpoint, now: float, quiet_seconds: float) -> int | None:
    """Refuses a query that may be running, a checkpoint with error findings or nothing committed;
    returns the batch a query stopped mid-batch planned and never committed (its replay's), or
    None for one stopped after its last batch."""

    def refuse(why: str) -> PurgeRefused:
        return PurgeRefused(f"refused: {why}; nothing was written", ckpt.url)

    if ckpt.latest_committed_batch is None:
        raise refuse("no batch is committed")
    times = [f.info.mtime for f in ckpt.files if f.kind in (FileKind.COMMIT, FileKind.OFFSET)]
    if any(t is None or now - t < quiet_seconds for t in times):
        planned = (
            f"batch {ckpt.latest_planned_batch} is planned and not committed, and " if ckpt.unfinished else ""
        )
        raise refuse(
            f"{planned}a commit or offset is newer than the quiet period ({duration_text(quiet_seconds)}): "
            "the query looks alive, and only a stopped query is purged (for one known to be stopped, a "
            "shorter --quiet-period)"
        )
    blocking = [f for f in validate(ckpt, ValidationOptions()).findings if f.severity == Severity.ERROR]
    if blocking:
        codes = ", ".join(sorted({f.code for f in blocking}))
        raise refuse(
            f"{len(blocking)} error finding(s) ({codes}). First: {blocking[0].path}: {blocking[0].message}"
        )
    return ckpt.latest_planned_batch if ckpt.unfinished else None


def _targets(ckpt: Checkpoint) -> list[tuple[StoreLineage, dict[str, Any] | None]]:
    """Each store of a transformWithState operator at the latest committed batch, with its
    operator's properties (which name its state variables): none in a format that keeps no TTL
    state."""
    batch = ckpt.latest_committed_batch
    if batch is None:
        return []
    return ckpt.states.unless_refused(StateAction.PURGE, lambda: _transform_with_state(ckpt, batch))


def _transform_with_state(ckpt: Checkpoint, batch: int) -> list[tuple[StoreLineage, dict[str, Any] | None]]:
    out = []
    for entry in checkpoint_lineage(ckpt, batch):
        op = ckpt.operators.get(entry.store.operator)
        meta = op.metadata if op is not None else None
        if meta is not None and meta.is_transform_with_state:
            if not entry.loadable:
                raise PurgeRefused(f"{entry.store}: the replay chain of version {entry.version} is "
                                   "incomplete: validate the checkpoint; nothing was written",
                                   ckpt.url)  # fmt: skip
            out.append((entry, meta.properties))
    return out


def _own_snapshot(entry: StoreLineage) -> bool:
    return entry.committed_file is not None and entry.committed_file.kind.is_base


def _look(ckpt: Checkpoint, entry: StoreLineage, props: dict[str, Any] | None, as_of_ms: int,
          policy: Policy) -> StorePurge:  # fmt: skip
    found: list[Expired] = []
    if _own_snapshot(entry):
        with _fetched(ckpt, entry, policy) as (folder, meta):
            found.extend(_counted(folder, meta, props, as_of_ms, str(entry.store), policy))
    else:
        rewrite_store(ckpt, entry, _counting(found, props, as_of_ms, str(entry.store), policy), policy=policy)
    return _store(entry, found, LOOKED)


def _purge(ckpt: Checkpoint, entry: StoreLineage, props: dict[str, Any] | None, as_of_ms: int,
           policy: Policy) -> StorePurge:  # fmt: skip
    if _own_snapshot(entry):  # its name is taken: reported, left to Spark
        looked = _look(ckpt, entry, props, as_of_ms, policy)
        return dataclasses.replace(looked, outcome=OWN_SNAPSHOT if looked.expired else NOTHING)
    found: list[Expired] = []
    rebuilt = rewrite_store(
        ckpt, entry, _evicting(found, props, as_of_ms, str(entry.store), policy), policy=policy
    )
    if rebuilt is None:
        return _store(entry, found, NOTHING)
    return _store(entry, found, PURGED, rebuilt.path, rebuilt.keys)


def _store(entry: StoreLineage, found: list[Expired], outcome: str, path: str | None = None,
           keys: int | None = None) -> StorePurge:  # fmt: skip
    s = entry.store
    return StorePurge(s.operator, s.partition, s.store, entry.version, tuple(found), outcome, path, keys)


def _variables(meta: SnapshotMetadata | None, props: dict[str, Any] | None, where: str) -> list[TtlVariable]:
    if meta is None or not meta.column_family_mapping:
        raise RebuildError(f"{where}: a transformWithState store without a zip naming its column families")
    return ttl_variables(props, meta, where)


def _counted(folder: Path, meta: SnapshotMetadata | None, props: dict[str, Any] | None, as_of_ms: int,
             where: str, policy: Policy) -> list[Expired]:  # fmt: skip
    variables = _variables(meta, props, where)
    db = open_db(folder, policy, read_only=True)
    try:
        return expired_in(db, variables, as_of_ms, where)[0]
    finally:
        db.close()


def _counting(found: list[Expired], props: dict[str, Any] | None, as_of_ms: int, where: str,
              policy: Policy) -> Rewrite:  # fmt: skip
    def look(folder: Path, meta: SnapshotMetadata | None, tmp: Path) -> Rewritten | None:
        found.extend(_counted(folder, meta, props, as_of_ms, where, policy))
        return None

    return look


def _evicting(found: list[Expired], props: dict[str, Any] | None, as_of_ms: int, where: str,
              policy: Policy) -> Rewrite:  # fmt: skip
    def evict(folder: Path, meta: SnapshotMetadata | None, tmp: Path) -> Rewritten | None:
        import rocksdict

        variables = _variables(meta, props, where)
        out = tmp / "purged"
        db = open_db(folder, policy)
        try:
            counts, eviction = expired_in(db, variables, as_of_ms, where)
            found.extend(counts)
            if not eviction.deletes and not eviction.puts:
                return None
            write_opts = rocksdict.WriteOptions()
            write_opts.disable_wal = True  # type: ignore[method-assign,assignment]
            write_in_batches(db, write_opts, _BATCH, "delete", eviction.deletes)
            write_in_batches(db, write_opts, _BATCH, "put", list(eviction.puts), list(eviction.puts.values()))
            db.flush()
            # The point of a purge is a smaller store: one compaction to the bottom level drops what
            # the eviction deleted and its tombstones (else the files grow by the tombstones).
            whole = rocksdict.CompactOptions()
            whole.set_bottommost_level_compaction(rocksdict.BottommostLevelCompaction.force())
            db.compact_range(None, None, whole)
            rocksdict.Checkpoint(db).create_checkpoint(str(out))
        finally:
            db.close()
        _check_evicted(out, variables, counts, as_of_ms, where, policy)
        return Rewritten(out, eviction.keys_removed, eviction.internal_removed)

    return evict


def _check_evicted(folder: Path, variables: list[TtlVariable], before: list[Expired], as_of_ms: int,
                   where: str, policy: Policy) -> None:  # fmt: skip
    """The purged store read again, apart from the writes: nothing expired left, every index in step
    with its values (`expired_in` checks them all), and each variable's entries those it had less the
    expired."""
    if any(p.stat().st_size for p in folder.glob("*.log")):
        raise RebuildError(f"{where}: the purged store has a non-empty WAL; its SSTs do not hold all of it")
    db = open_db(folder, policy, read_only=True)
    try:
        after, left = expired_in(db, variables, as_of_ms, where)
    finally:
        db.close()
    if left.deletes or left.puts:
        raise RebuildError(f"{where}: the purged store still has {len(left.deletes)} keys to evict; nothing "
                           "was published")  # fmt: skip
    for was, now in zip(before, after, strict=True):
        if now.expired or now.entries != was.entries - was.expired:
            raise RebuildError(f"{where}: {was.name} holds {now.entries} entries after the purge "
                               f"({now.expired} expired), not {was.entries - was.expired}; nothing was "
                               "published")  # fmt: skip


@contextmanager
def _fetched(
    ckpt: Checkpoint, entry: StoreLineage, policy: Policy
) -> Iterator[tuple[Path, SnapshotMetadata]]:
    """The store's own snapshot zip and SSTs in a work folder, RocksDB's merge operator set as the
    rebuild sets it, for as long as the block runs."""
    zip_file = entry.committed_file
    assert zip_file is not None
    offset = ckpt.batches[entry.batch].offset
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-expiry-"))
    try:
        (tmp / "db").mkdir()
        fetched = fetch_base(ckpt, zip_file, zip_file.rel.rsplit("/", 1)[0], tmp, policy, 0)
        set_options(tmp / "db", bulk_options(policy, merge_delimiter(offset.conf if offset else {})))
        yield tmp / "db", fetched.meta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
