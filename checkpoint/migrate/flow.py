"""`ckpt migrate SRC DEST`: a new checkpoint on RocksDB format V2 whose recovery at a batch loads
the state SRC's recovery loads there. SRC is never written.

DEST is a fork of SRC at the batch (`checkpoint.fork`: its logs, schema and operator metadata,
markers and checks) without SRC's state files, and with:
- every store's state at the batch written as a V2 snapshot `<v>_<id>.zip` (`checkpoint.migrate.state`:
  ours, because Spark's rewriter reads RocksDB only and writes the session's format);
- the offset file of the batch pinning the RocksDB provider (SPARK-21192: the pin, not the
  session, decides at a restart);
- the commit of the batch in format V2, naming the new stores' ids in operator-metadata order.

The steps, and what stops each:
1. preflight (exit 2, nothing written): SRC stopped past the quiet period, no error finding
   (the fork's own refusal), Spark's default formats only (a RocksDB V2 source is forked, not
   migrated), operator metadata present, no column-family store, a prefix-scanned store's key
   schema readable (its keys are re-laid), DEST empty (or an interrupted migration of the same
   SRC and batch, started over);
2. the fork's started marker, so validation refuses DEST (`INCOMPLETE_FORK`) until step 5;
3. the state, a store a job (`StoreWriter`: here, or in Spark tasks as `jobs.migrate` runs it), the
   leases checked before each;
4. the logs, through the fork's writer, which reads every file back;
5. Spark's state data source reads every store of SRC and of DEST at the batch: the same rows (a
   count and two hashes of each row's key and value, summed), each in the partition Spark's hash
   puts it in, or the migration stops, DEST marked incomplete; then the completion marker, and
   the audit record.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from checkpoint.crash import crash_point
from checkpoint.errors import CheckpointError, ForkIncomplete, MigrationFailed, MigrationRefused
from checkpoint.fork import (
    STEP_STATE,
    ForkItem,
    ForkPlan,
    ForkPlanOptions,
    ForkSource,
    WritePlanOptions,
    check_dest,
    inspect_dest,
    plan_fork,
    read_source,
    write_fork_plan,
)
from checkpoint.format import (
    FORK_STARTED,
    MAINT_TEMP_PREFIX,
    MAX_SCHEMA_BYTES,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
    ROCKSDB_V2,
    SIDECAR_BYTES,
    ByEngine,
    FileKind,
    OperatorMetadata,
    StateAction,
    StoreInfo,
    classify,
    parse_sidecar,
    read_schema_file,
    row_shape,
)
from checkpoint.migrate.state import PrefixKey, StoreJob, StoreWritten
from checkpoint.model import Checkpoint, StoreId, store_folder
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report
from checkpoint.rocksdb import ZipTarget
from checkpoint.safety import AuditTrail, TwoSided, folder_name, held_by, refuse_overlap
from checkpoint.storage import Storage

log = logging.getLogger(__name__)

# SRC's state files (and their sidecars): DEST gets its own. Schema, operator metadata and logs
# are carried over.
_STATE_KINDS = frozenset({FileKind.DELTA, FileKind.SNAPSHOT, FileKind.ZIP, FileKind.CHANGELOG, FileKind.SST,
                          FileKind.WAL_LOG})  # fmt: skip


def _is_state(rel: str) -> bool:
    main = rel[: -len(".crc")] if rel.endswith(".crc") else rel
    return classify(main).kind in _STATE_KINDS


@dataclass(frozen=True)
class Placement:
    """Where Spark's hash puts a store's rows: partition pmod(murmur3(key[:leading]), partitions),
    the key fields taken as Python slices them (None: all)."""

    partitions: int
    leading: int | None
    # Column families (transformWithState): read raw, every family, the rows placed by Spark's
    # hash of each row's partition key
    families: bool = False


@dataclass(frozen=True)
class StoreRead:
    """One operator store, every partition, as Spark's state data source reads it."""

    rows: int
    digest: str  # xxhash64 and Murmur3 of each row's key and value, summed: order-free, every field counts
    misplaced: int  # rows in another partition than `Placement` names


class ReadSide(NamedTuple):
    """A checkpoint as Spark's state data source reads it: in a session of its own format version
    (read in another's, it finds no files or no ids)."""

    storage: Storage
    format_version: int


class StateDigests(Protocol):
    """Spark's state data source (`jobs.migrate.SparkStateDigests`)."""

    def compare(self, src: ReadSide, dest: ReadSide, batch: int, store: StoreId,
                placement: Placement) -> tuple[StoreRead, StoreRead]:  # fmt: skip
        """Every partition of one operator's store at `batch`, in SRC and in DEST."""
        ...


class StoreWriter(Protocol):
    """Runs a migration's store jobs (`jobs.migrate.SparkStoreWriter`: in Spark tasks)."""

    def __call__(self, jobs: list[StoreJob], check: Callable[[], None]) -> Iterator[StoreWritten]:
        """What each job wrote, as it finishes, `check` (the leases') called before each starts.
        Once one fails, no further job starts, and when none runs any more, `store_failed` (or what
        `check` raised) is raised."""
        ...


def write_here(jobs: list[StoreJob], check: Callable[[], None]) -> Iterator[StoreWritten]:
    """`StoreWriter` in this process, a store after another, stopping at the first failure."""
    for job in jobs:
        check()
        try:
            yield job.run()
        except CheckpointError as exc:
            raise store_failed(job, str(exc)) from exc


def store_failed(job: StoreJob, why: str) -> MigrationFailed:
    return MigrationFailed(f"{job.entry.store}: {why}; the destination is marked incomplete: run the same "
                           "migration again to start it over", job.target.storage.url)  # fmt: skip


def placement_of(partitions: int, store: StoreInfo) -> Placement:
    """The key fields a store's operator partitions its input by: all of them, but the session
    start of a session window (its prefix-scanned grouping fields lead) and the index of a join's
    keyWithIndexToValue store."""
    if store.num_cols_prefix_key:
        return Placement(partitions, store.num_cols_prefix_key)
    if store.name.endswith("keyWithIndexToValue"):
        return Placement(partitions, -1)
    return Placement(partitions, None)


@dataclass(frozen=True)
class MigrationResult:
    source: str
    dest: str
    batch: int
    source_state: str  # "hdfs V1", "rocksdb V1"
    stores: tuple[StoreWritten, ...]
    proven: tuple[dict[str, Any], ...]  # per operator store: the rows and the digest SRC and DEST share
    log_files: int
    seconds: float
    state_seconds: float  # writing every store's state (side by side in Spark tasks)
    proof_seconds: float  # Spark's reader over both sides

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "dest": self.dest, "batch": self.batch,
                "source_state": self.source_state, "target_state": ROCKSDB_V2.name,
                "stores": [s.as_dict() for s in self.stores],
                "keys": sum(s.keys for s in self.stores), "proven": list(self.proven),
                "log_files": self.log_files, "seconds": self.seconds, "state_seconds": self.state_seconds,
                "proof_seconds": self.proof_seconds}  # fmt: skip


# Each prefix-scanned store's key layout, by (operator, store name), where its keys are re-laid.
Layouts = dict[tuple[int, str], PrefixKey]


def preflight(source: ForkSource, options: MigrationOptions) -> Layouts:
    """Refuses (MigrationRefused) what this migration cannot carry (the fork's reading of SRC
    has refused error findings already); the key layout of each prefix-scanned store to re-lay."""
    quiet_seconds = options.quiet_seconds
    now = time.time() if options.now is None else options.now
    ckpt = source.ckpt
    where = ckpt.url
    ckpt.states.refuse(StateAction.MIGRATE, where)
    if ckpt.is_live(now, quiet_seconds):
        raise MigrationRefused(f"the query looks alive (a commit or offset within the quiet period "
                               f"of {quiet_seconds:.0f} s, or an unfinished batch): stop it first",
                               where)  # fmt: skip
    if not ckpt.operator_folders:
        raise MigrationRefused("a query without state: nothing is provider-specific, `ckpt fork` moves it",
                               where)  # fmt: skip
    prefixed: Layouts = {}
    # The stores come from the operator metadata: an operator folder without it would be left out
    # (validation refuses such a checkpoint first; this holds if it did not).
    for op in sorted(ckpt.operator_folders | {e.store.operator for e in source.lineage}):
        meta = ckpt.operators.get(op)
        if meta is None or meta.metadata is None:
            raise MigrationRefused(f"operator {op} has no operator metadata (state/{op}/_metadata): the "
                                   "checkpoint was last run before Spark 4.0; run the query once on Spark "
                                   "4.x, stop it, and migrate then", where)  # fmt: skip
        prefixed.update(ckpt.states.engine.of(_RELAY)(ckpt, op, meta.metadata, where))
    return prefixed


def _as_laid(ckpt: Checkpoint, op: int, metadata: OperatorMetadata, where: str) -> Layouts:
    """RocksDB's keys, column families and all, are laid as RocksDB lays them: nothing to re-lay."""
    return {}


def _relaid(ckpt: Checkpoint, op: int, metadata: OperatorMetadata, where: str) -> Layouts:
    """The HDFS-backed store keeps each key row whole, where RocksDB's prefix encoder puts a
    prefix-scanned store's prefix columns first: each such store's layout, to re-lay its keys.
    Column families are RocksDB's alone: one found here is not carried."""
    if metadata.keeps_column_families:
        raise MigrationRefused(f"operator {op} ({metadata.name}) keeps column families, which a migration "
                               "does not carry", where)  # fmt: skip
    return {(op, s.name): _prefix_key(ckpt, op, s.name, s.num_cols_prefix_key)
            for s in metadata.stores if s.num_cols_prefix_key}  # fmt: skip


# RocksDB's prefix encoder already laid a RocksDB source's keys; the HDFS-backed store kept each key
# row whole, so a prefix-scanned store's keys are laid again.
_RELAY = ByEngine(hdfs=_relaid, rocksdb=_as_laid)


def _prefix_key(ckpt: Checkpoint, op: int, name: str, leading: int) -> PrefixKey:
    """A prefix-scanned store's key layout, from its key schema (the HDFS-backed store keeps the
    key whole; RocksDB cuts it after `leading` fields)."""
    rel = f"{store_folder(StoreId(op, 0, name))}/_metadata/schema"
    path = ckpt.storage.full(rel)
    try:
        key, _ = read_schema_file(ckpt.storage.read_range(rel, 0, MAX_SCHEMA_BYTES + 1), path)
        shape = row_shape(key, path)
    except CheckpointError as exc:
        raise MigrationRefused(f"operator {op} store {name} is prefix-scanned (a session window) and "
                               f"its key cannot be laid out for RocksDB: {exc}",
                               ckpt.url) from exc  # fmt: skip
    if not 0 < leading < len(shape.fixed):
        raise MigrationRefused(f"operator {op} store {name}: {leading} prefix fields of a key of "
                               f"{len(shape.fixed)}", ckpt.url)  # fmt: skip
    return PrefixKey(shape, leading)


def _store_order(source: ForkSource) -> dict[int, tuple[str, ...]]:
    """Each operator's store names in operator-metadata order: the order of ids in a V2 commit."""
    return {
        op: tuple(s.name for s in o.metadata.stores) for op, o in source.ckpt.operators.items() if o.metadata
    }


def _offset_pinning_rocksdb(raw: bytes, path: str) -> bytes:
    """The offset file with the RocksDB provider pinned in its conf; every other line as it was."""
    lines = raw.decode("utf-8").split("\n")
    try:
        meta = json.loads(lines[1])
        meta.setdefault("conf", {})[PROVIDER_CONF] = ROCKSDB_PROVIDER
    except (IndexError, ValueError, AttributeError) as exc:
        raise MigrationRefused(f"unreadable offset metadata: {exc}", path) from exc
    lines[1] = json.dumps(meta, separators=(",", ":"))
    return "\n".join(lines).encode()


def _commit_v2(raw: bytes, ids: dict[int, list[list[str]]], path: str) -> bytes:
    try:
        body = json.loads(raw.decode("utf-8").split("\n", 1)[1])
    except (IndexError, ValueError) as exc:
        raise MigrationRefused(f"unreadable commit: {exc}", path) from exc
    body["stateUniqueIds"] = {str(op): parts for op, parts in sorted(ids.items())}
    return ("v2\n" + json.dumps(body, separators=(",", ":"))).encode()


def plan_logs(source: ForkSource, dest: Storage, ids: dict[StoreId, str]) -> ForkPlan:
    """The fork of SRC's logs, schema and operator metadata, with the batch's offset and commit
    rewritten; no state file of SRC."""
    fork = plan_fork(source, ForkPlanOptions(dest))
    order, batch = _store_order(source), source.batch
    partitions = max(s.partition for s in ids) + 1
    commit_ids = {op: [[ids[StoreId(op, p, name)] for name in names] for p in range(partitions)]
                  for op, names in order.items() if any(s.operator == op for s in ids)}  # fmt: skip
    items: list[ForkItem] = []
    for item in fork.items:
        what = classify(item.rel)
        if _is_state(item.rel):
            continue
        if what.kind in (FileKind.OFFSET, FileKind.COMMIT) and what.batch == batch:
            raw = source.ckpt.storage.read_bytes(item.rel, limit=POLICY.max_log_file_bytes)
            path = source.ckpt.storage.full(item.rel)
            data = (_offset_pinning_rocksdb(raw, path) if what.kind == FileKind.OFFSET
                    else _commit_v2(raw, commit_ids, path))  # fmt: skip
            item = dataclasses.replace(item, data=data, size=len(data), crc=None)
        items.append(item)
    return dataclasses.replace(fork, items=tuple(items))


def _no_reader(src: Storage, dest: Storage) -> StateDigests:
    raise MigrationFailed("no reader of the state was given to prove the migration with", dest.url)


@dataclass(frozen=True)
class MigrationPorts:
    """What the migration needs of an engine, given SRC and DEST: the reader of the state on both
    sides, made once DEST holds what it reads, and what writes each store's state, made once the
    preflight passed. `jobs.migrate.spark_ports` gives Spark's (its tasks write, its state reader
    proves); by default the stores are written in this process and no reader is given, so nothing
    is ever marked complete."""

    digests: Callable[[Storage, Storage], StateDigests] = _no_reader
    writer: Callable[[Storage, Storage], StoreWriter] = lambda src, dest: write_here


@dataclass(frozen=True)
class MigrationOptions:
    ports: MigrationPorts = MigrationPorts()
    batch: int | None = None  # a committed batch; default: the latest committed
    quiet_seconds: float = POLICY.quiet_seconds
    what: str = "migrate"  # what the leases say they are held for
    now: float | None = None  # a manual clock; None: the time


def migrate_checkpoint(request: TwoSided, options: MigrationOptions) -> MigrationResult:
    """The migration's door: `request`'s overlap refused and both leases taken (`safety.door`),
    then the migration under them."""
    with request.held(options.what) as check:
        return _migrate(request.src, request.dest, request.audit_trail(), options, check)


def _migrate(
    src: Storage, dest: Storage, audit: AuditTrail, options: MigrationOptions, check: Callable[[], None]
) -> MigrationResult:
    """See the module docstring. The caller holds SRC's and DEST's leases and passes their
    `check`; the options' ports make what writes the state, once the preflight passed, and Spark's
    reader, once DEST holds what it reads."""
    started = time.monotonic()
    # The time once the leases are held: a wait for them leaves no earlier clock behind.
    now = time.time() if options.now is None else options.now
    options = dataclasses.replace(options, now=now)
    batch = options.batch
    refuse_overlap(src, dest)
    state = inspect_dest(dest)
    if state.complete is not None:
        raise MigrationRefused("the destination holds a complete checkpoint already", dest.url)
    check_dest(state, src.url, batch, new_query_id=False, dest=dest)
    if state.started is not None:  # an interrupted migration of this SRC: everything in DEST is ours
        batch = state.started.batch
        log.info("%s: starting an interrupted migration over (%d files removed)", dest.url, len(state.files))
        dest.delete_batch(sorted(state.files))
    source = read_source(src, batch)
    prefixed = preflight(source, options)
    # Before DEST holds anything: a writer that cannot reach a side refuses.
    write_stores = options.ports.writer(src, dest)
    entries = list(source.lineage)
    ids = {e.store: str(uuid.uuid4()) for e in entries}
    plan = plan_logs(source, dest, ids)
    dest.write_if_absent(FORK_STARTED, plan.started().to_json(), MAINT_TEMP_PREFIX)
    jobs = [StoreJob(source.ckpt, e,
                     ZipTarget(dest, store_folder(e.store), e.version, ids[e.store], sidecar=True),
                     prefixed.get((e.store.operator, e.store.store))) for e in entries]  # fmt: skip
    written, writing = [], time.monotonic()
    for i, store in enumerate(write_stores(jobs, check), 1):
        written.append(store)
        crash_point("migrate.after_store", i)
        report(log, Progress("stores migrated", i, len(jobs)), "%d of %d stores written", i, len(jobs))

    state_seconds = round(time.monotonic() - writing, 3)

    def prove() -> None:  # Spark's reader, once DEST holds what it reads
        proving = time.monotonic()
        proven.extend(_prove(options.ports.digests(src, dest), src, dest, source, written))
        proof_seconds.append(round(time.monotonic() - proving, 3))

    proven: list[dict[str, Any]] = []
    proof_seconds: list[float] = []
    plan = _with_written_state(plan, dest)
    try:
        write_fork_plan(TwoSided(src, dest, held_by(check)), WritePlanOptions(plan, before_complete=prove))
    except ForkIncomplete as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, MigrationFailed) else exc
        raise MigrationFailed(f"the migration stopped ({cause}); the destination is marked incomplete: run "
                              "the same migration again to start it over", dest.url) from exc  # fmt: skip
    result = MigrationResult(src.url, dest.url, source.batch, source.ckpt.state_format, tuple(written),
                             tuple(proven), plan.files, round(time.monotonic() - started, 3), state_seconds,
                             proof_seconds[0])  # fmt: skip
    rel = f"{folder_name(src.url)}/migrations/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}.json"
    audit.storage.write(rel, json.dumps({"at": time.time(), **result.as_dict()}, indent=1).encode())
    return result


def _with_written_state(plan: ForkPlan, dest: Storage) -> ForkPlan:
    """The plan with the state this migration wrote: the fork's writer then finds each file in
    place (nothing is copied) and checks DEST holds exactly the plan, each zip against its `.crc`."""
    planned = {i.rel for i in plan.items} | {FORK_STARTED}
    items = []
    for f in dest.list_files("state"):
        if f.rel in planned:
            continue
        crc = None
        if f.rel.endswith(".zip"):
            sidecar = f"{f.rel}.crc"
            crc = parse_sidecar(dest.read_bytes(sidecar, limit=SIDECAR_BYTES), dest.full(sidecar)).value
        items.append(ForkItem(f.rel, f.size, STEP_STATE, crc=crc))
    return dataclasses.replace(plan, items=(*items, *plan.items))


def _prove(engine: StateDigests, src: Storage, dest: Storage, source: ForkSource,
           written: list[StoreWritten]) -> list[dict[str, Any]]:  # fmt: skip
    """Every operator store of SRC and DEST read by Spark at the batch: the same rows, each where
    Spark's hash puts it, as many as the snapshots' key counts say; or nothing is marked complete."""
    out = []
    sides = ReadSide(src, source.ckpt.states.version), ReadSide(dest, ROCKSDB_V2.version)
    for op, meta in sorted(source.ckpt.operators.items()):
        for store in meta.metadata.stores if meta.metadata else ():
            sid, placement = StoreId(op, 0, store.name), placement_of(store.num_partitions, store)
            if meta.metadata and meta.metadata.keeps_column_families:
                placement = dataclasses.replace(placement, families=True)
            was, now = engine.compare(*sides, source.batch, sid, placement)
            where = f"operator {op} store {store.name}"
            if (was.rows, was.digest) != (now.rows, now.digest):
                raise MigrationFailed(f"{where}: Spark reads {was.rows} rows ({was.digest}) in the source "
                                      f"and {now.rows} ({now.digest}) in the destination; the destination "
                                      "stays marked incomplete", dest.url)  # fmt: skip
            counted = sum(w.keys for w in written if (w.operator, w.store) == (op, store.name))
            if counted != now.rows and not placement.families:  # raw rows: a list is a row a value
                raise MigrationFailed(f"{where}: the snapshots written count {counted} keys and Spark reads "
                                      f"{now.rows} rows; the destination stays marked incomplete",
                                      dest.url)  # fmt: skip
            if was.misplaced or now.misplaced:
                # In the source, Spark itself placed every row: a count there means the hash is not
                # the one this operator partitions by, and nothing can be said of DEST's placement.
                raise MigrationFailed(f"{where}: {now.misplaced} rows of the destination (and "
                                      f"{was.misplaced} of the source) are in another partition than "
                                      "Spark's hash puts them in; the destination stays marked incomplete",
                                      dest.url)  # fmt: skip
            out.append({"operator": op, "store": store.name, "rows": was.rows, "digest": was.digest,
                        "partitions_checked": placement.partitions})  # fmt: skip
    return out
