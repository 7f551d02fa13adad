"""Planning an orphan cleanup, one state partition at a time, into a manifest in the audit trail.

Memory is one partition's listing plus the retained set's inputs, whatever the checkpoint holds:

1. The logs (everything outside `state/<op>/<part>/`: commits, offsets, metadata, schema files)
   are listed and read strictly, and checked (the commit-log findings of `validate`). They name,
   for every retained batch, each store's committed id.
2. Each partition folder is listed, read and decided on its own by `rules.find_orphans` (several
   at once: in threads on object stores, so their requests overlap; in worker processes on local
   disks, where deciding is Python work that one core bounds), with the inputs of that partition only:
   the committed ids of its stores, the lineage headers of its committed changelogs, the SSTs its
   zips list (read only for the zips that stay: a zip that goes costs no request). The rules need
   nothing from another partition but one figure, the oldest SST a retained zip lists (a live
   query's SSTs go only when older): the SSTs it decides are held back in a spill file until every
   partition has given its oldest, then decided.
3. Candidates are written as they are found to a local spill file, and the manifest (a header with
   the totals, then a line per candidate, zips before the SSTs they list, sidecars after their main
   file) is uploaded from it to the audit trail.

Fail closed (docs/safety.md): a log that cannot be parsed, an unknown version, a commit-log error
finding, a lineage header or retained zip that cannot be read, a listing that fails part-way: each
stops the plan with a GcError, and no manifest is written.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import multiprocessing
import os
import pickle
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from checkpoint.analysis.validate import Category, Severity, validate
from checkpoint.cleanup.manifest import Plan, PlannedFile, Totals, _line, _line_tail
from checkpoint.cleanup.rules import (
    FileIndex,
    GcOptions,
    Kept,
    OrphanScan,
    Reason,
    RetentionInputs,
    UnsafeToPlan,
    find_orphans,
)
from checkpoint.errors import CheckpointError, GcError
from checkpoint.format.layout import FileKind, classify
from checkpoint.model.checkpoint import (
    Checkpoint,
    CheckpointFile,
    StoreId,
    build_checkpoint,
    state_partition_folders,
)
from checkpoint.model.lineage import store_ids
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report
from checkpoint.storage import FileInfo, Storage

if TYPE_CHECKING:
    from checkpoint.cleanup.audit import AuditTrail

log = logging.getLogger(__name__)


def commit_digests(ckpt: Checkpoint) -> dict[int, str]:
    """Digests of the very commit files the plan was computed from (no second read, no race)."""
    return {b.id: b.commit.digest for b in ckpt.batches.values() if b.commit is not None}


Lister = Callable[[Storage, str], list[FileInfo]]


def _list(storage: Storage, folder: str) -> list[FileInfo]:
    return storage.list_files(folder)


def plan_gc(
    storage: Storage,
    audit: AuditTrail,
    grace_seconds: float = POLICY.grace_seconds,
    retain_batches: int | None = None,
    quiet_seconds: float = POLICY.quiet_seconds,
    now: float | None = None,
    allow_short_grace: bool = False,
    workers: int | None = None,
    lister: Lister = _list,
    query_stopped: bool = False,
) -> Plan:
    """Plans the cleanup of the checkpoint at `storage` and writes its manifest to `audit`;
    raises GcError when planning is unsafe. `lister` lists one partition folder, sorted by path
    as `Storage.list_files` gives it: the manifest lists each kind in that order (tests give one
    that drops mtimes, as some backends do).

    A query is planned under the live rules (two versions of margin, SSTs only below the oldest
    a retained zip lists: a running executor may reuse one) unless the caller knows it stopped
    (`query_stopped`): a running query idle for longer than the quiet period looks stopped by
    its logs alone. Logs newer than the quiet period make it live whatever the caller says."""
    now = time.time() if now is None else now
    if grace_seconds < POLICY.min_grace_seconds and not allow_short_grace:
        raise GcError(
            f"a grace period of {grace_seconds:.0f} s is below {POLICY.min_grace_seconds / 60:g} minutes: "
            "files of a batch still being written could be deleted. Override only if nothing writes to "
            "this checkpoint",
            storage.url,
        )
    if retain_batches is not None and retain_batches < 1:
        raise GcError("--retain-batches must be at least 1", storage.url)
    base, folders, window, committed = _read_logs(storage, retain_batches)
    live = not query_stopped or base.is_live(now, quiet_seconds)
    options = GcOptions(grace_seconds=grace_seconds, live=live, defer_live_ssts=True)
    if workers is None:
        workers = planning_workers(storage, len(folders), lister)
    plan_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="ckpt-plan-") as tmp, _Spill(tmp) as spill:
        context = _Context(base, window, dict(committed), options, now, lister, tmp)
        for folder, decided in _in_order(context, folders, workers, spill):
            spill.partition(folder, decided)
        spill.finish()
        plan = Plan(
            plan_id=plan_id,
            checkpoint=storage.url,
            planned_at=now,
            against_batch=window[-1],
            latest_planned_batch=base.latest_planned_batch,
            live=live,
            grace_seconds=grace_seconds,
            retain_batches=retain_batches,
            commit_digests=commit_digests(base),
            files=spill.files,
            bytes=spill.bytes,
            by_reason=spill.by_reason.as_dict(),
            by_store=spill.by_store.as_dict(),
            retained_files=spill.retained,
            kept=dict(sorted(spill.kept.items())),
            partition_files=spill.partition_files,
            sst_floor=spill.floor if live else None,
            quiet_seconds=quiet_seconds,
        )
        return audit.write_manifest(plan, spill.line_files)


def _read_logs(
    storage: Storage, retain_batches: int | None
) -> tuple[Checkpoint, list[str], list[int], dict[str, dict[int, dict[StoreId, str]]]]:
    """(the checkpoint's logs, its partition folders, the retained batches, each partition's
    committed ids over them): everything outside `state/<op>/<part>/`, listed and read strictly."""
    folders = state_partition_folders(storage)
    inside = tuple(f + "/" for f in folders)
    outside = [f for f in storage.list_outside(folders) if not f.rel.startswith(inside)]
    base = build_checkpoint(storage, CheckpointFile.of_listing(outside), strict=True)
    window = _window(base, retain_batches)
    return base, folders, window, _committed_by_partition(base, window, folders)


class Recheck:
    """A plan's lines classified again against the checkpoint as it is now, under the apply's
    lease (docs/safety.md, "a plan is re-checked at apply"): the commit log is read again, and each
    partition a line names is listed and decided again by the very rules that planned it. A line
    passes only if its file is gone (the apply skips it) or is still a candidate now. Anything
    else (a log file, a path outside `state/<op>/<part>/`, a file a retained batch reads, an
    SST a live query could reuse) raises GcError: the manifest is not what this tool planned.

    Memory is one partition's decision: lines come partition by partition, as the plan wrote
    them (a live query's held SSTs come again at the end, and their partitions are decided again)."""

    def __init__(self, plan: Plan, storage: Storage) -> None:
        self._plan, self._storage = plan, storage
        # The clock never goes behind the plan's: files only age. A test's plan made "later".
        self._now = max(time.time(), plan.planned_at)
        base, folders, window, committed = _read_logs(storage, plan.retain_batches)
        self._base, self._window, self._committed = base, window, committed
        self._folders = frozenset(folders)
        live = plan.live or base.is_live(self._now, plan.quiet_seconds)
        self._options = GcOptions(grace_seconds=plan.grace_seconds, live=live, defer_live_ssts=True)
        self._folder: str | None = None
        self._listed: frozenset[str] = frozenset()
        self._candidates: frozenset[str] = frozenset()
        self._held: dict[str, float] = {}

    def check(self, line: PlannedFile) -> None:
        path = line.path
        parts = path.split("/")
        what = classify(path)
        folder = "/".join(parts[:3])
        if what.kind not in _DELETABLE:
            self._refuse(path, f"a {what.kind.value} file, which cleanup never deletes")
        if len(parts) < 4 or ".." in parts or "" in parts or folder not in self._folders:
            self._refuse(path, "a path outside the checkpoint's state partition folders")
        if folder != self._folder:
            self._decide(folder)
        if path not in self._listed or path in self._candidates:
            return
        floor = self._plan.sst_floor
        held = self._held.get(path)
        if held is not None and floor is not None and held < floor:
            return
        self._refuse(path, "not an orphan of the checkpoint as it is now")

    def _decide(self, folder: str) -> None:
        listing = CheckpointFile.of_listing(self._storage.list_files(folder))
        scan = _scan(self._base, self._window, self._committed.get(folder, {}), listing, self._options,
                     self._now)  # fmt: skip
        self._folder = folder
        self._listed = frozenset(f.info.rel for f in listing)
        self._candidates = frozenset(c.rel for c in scan.candidates if c.rel not in scan.held_for_floor)
        self._held = dict(scan.held_for_floor)

    def _refuse(self, path: str, why: str) -> NoReturn:
        raise GcError(f"plan {self._plan.plan_id} refused, nothing deleted: its manifest names {path}, {why}",
                      self._plan.manifest)  # fmt: skip


# What a plan may name: the state files the rules decide. Never a log, metadata or schema file.
_DELETABLE = frozenset({FileKind.ZIP, FileKind.CHANGELOG, FileKind.SST, FileKind.WAL_LOG, FileKind.SPARK_CRC,
                        FileKind.HADOOP_CRC, FileKind.MAINT_TEMP})  # fmt: skip


def _window(base: Checkpoint, retain_batches: int | None) -> list[int]:
    """The retained batches, once the logs proved sound."""
    if base.format_version != 2:
        raise GcError("format V1 checkpoint: Spark cleans these itself; gc handles format V2 only", base.url)
    errors = [f for f in validate(base, categories=frozenset({Category.COMMIT_LOG})).findings
              if f.severity == Severity.ERROR]  # fmt: skip
    if errors:
        raise GcError(
            "the commit log is inconsistent: " + "; ".join(f"{f.code} {f.message}" for f in errors), base.url
        )
    committed = sorted(b.id for b in base.batches.values() if b.committed)
    if not committed:
        raise GcError("no committed batch: nothing can be told apart from a batch in flight", base.url)
    return committed[-retain_batches:] if retain_batches else committed


def _committed_by_partition(
    base: Checkpoint, window: list[int], folders: list[str]
) -> dict[str, dict[int, dict[StoreId, str]]]:
    """Partition folder -> batch -> store -> committed id, over the window: the one input of the
    retained set that spans partitions, as large as retained batches x stores. A store the latest
    batch committed must have its partition folder: a missing one stops the plan (fail closed)."""
    out: dict[str, dict[int, dict[StoreId, str]]] = defaultdict(lambda: defaultdict(dict))
    for batch in window:
        for sid in store_ids(base, batch):
            uid = base.committed_unique_id(batch, sid)
            if uid is None:
                raise GcError(
                    f"batch {batch} names no committed id for {sid}", base.storage.full(f"commits/{batch}")
                )
            out[f"state/{sid.operator}/{sid.partition}"][batch][sid] = uid
    missing = sorted(set(out) - set(folders), key=lambda f: [int(p) for p in f.split("/")[1:]])
    latest = [f for f in missing if window[-1] in out[f]]
    if latest:
        raise GcError(f"unsafe to plan: {latest[0]} holds stores that batch {window[-1]} committed, and is "
                      "missing", base.url)  # fmt: skip
    return {folder: dict(batches) for folder, batches in out.items()}  # plain dicts: sent to workers


@dataclass(frozen=True)
class _Context:
    """What deciding any one partition needs: the same for all of them, sent once to each worker
    process."""

    base: Checkpoint
    window: list[int]
    committed: dict[str, dict[int, dict[StoreId, str]]]  # partition folder -> batch -> store -> id
    options: GcOptions
    now: float
    lister: Lister
    spill_dir: str  # the plan's local temp folder


@dataclass(frozen=True)
class _Decided:
    """One partition decided, as the spill takes it: a few figures, its candidates already written
    as manifest lines (held ones apart), so a worker sends back neither the partition nor its lines."""

    listed: int
    retained: int
    by_reason: Totals
    by_store: Totals
    kept: Counter[str]
    oldest_retained_sst: float | None
    # Decided in a pool: its lines and held lines, in files of its own for the spill to append in
    # folder order; else they went straight to the spill.
    apart: tuple[str, str] | None = None


def _decide(context: _Context, folder: str, lines: TextIO, held: TextIO) -> _Decided:
    infos = context.lister(context.base.storage, folder)
    listing = CheckpointFile.of_listing(infos)
    committed = context.committed.get(folder, {})
    scan = _scan(context.base, context.window, committed, listing, context.options, context.now)
    # A partition's candidates fall into a few groups of one reason and one store: each group's
    # texts are made and quoted once, and its totals summed once, not per line or per file. In one
    # partition folder a store's name tells its operator and partition, and a file in no store
    # (a Hadoop crc) has none of the three.
    groups: dict[tuple[Reason, str | None], _Group] = {}
    held_for_floor = scan.held_for_floor
    ordered = scan.candidates  # zips before the SSTs they list, sidecars after their main file
    for start in range(0, len(ordered), _LINES_PER_WRITE):
        out = []
        for f, reason in ordered[start : start + _LINES_PER_WRITE]:
            info, what = f.info, f.what
            key = (reason, what.store)
            group = groups.get(key)
            if group is None:
                op, part, name = what.operator, what.partition, what.store  # all set, or none (a Hadoop crc)
                store = None if op is None or part is None or name is None else StoreId(op, part, name).label
                group = groups[key] = _Group(_REASON_TEXT[reason], store)
            rel, size = info.rel, info.size
            if held_for_floor and rel in held_for_floor:  # the SST's mtime decides, for it and its sidecars
                planned = PlannedFile(rel, size, info.mtime or 0.0, group.reason, group.store)
                held.write(json.dumps({"sst_mtime": held_for_floor[rel], **asdict(planned)}) + "\n")
                continue
            out.append(_line(size, info.mtime or 0.0, rel, group.tail))
            group.sizes.append(size)
        lines.write("".join(out))
    by_reason, by_store = Totals(), Totals()
    for group in groups.values():
        if not group.sizes:  # only held back, for now
            continue
        by_reason.add(group.reason, sum(group.sizes), len(group.sizes))
        by_store.add(group.store, sum(group.sizes), len(group.sizes))
    return _Decided(
        listed=len(listing),
        retained=len(scan.retained),
        by_reason=by_reason,
        by_store=by_store,
        kept=Counter({why.value: n for why, n in Counter(scan.kept.values()).items()}),
        oldest_retained_sst=scan.oldest_retained_sst,
    )


class _Group:
    """The candidates of one partition with one reason and one store: the tail of their manifest
    lines, and their sizes."""

    __slots__ = ("reason", "store", "tail", "sizes")

    def __init__(self, reason: str, store: str | None) -> None:
        self.reason, self.store = reason, store
        self.tail = _line_tail(reason, store)
        self.sizes: list[int] = []


_REASON_TEXT = {reason: reason.value for reason in Reason}  # Enum's .value is a slow property


def _decide_apart(context: _Context, folder: str) -> _Decided:
    """In a pool: the lines into files of the partition's own, so a partition's lines are on disk,
    never held whole in a worker or passed back to the plan."""
    stem = os.path.join(context.spill_dir, folder.replace("/", "_"))
    apart = (f"{stem}.jsonl", f"{stem}.held.jsonl")
    with open(apart[0], "w") as lines, open(apart[1], "w") as held:
        decided = _decide(context, folder, lines, held)
    return replace(decided, apart=apart)


_QUEUED_PER_WORKER = 4
_worker_context: _Context | None = None  # in a worker process: set once, by its initializer


def _start_worker(context: _Context | str) -> None:
    """A worker's initializer: the context itself (forked) or the pickle file it was written to."""
    global _worker_context
    if isinstance(context, str):
        with open(context, "rb") as f:
            _worker_context = pickle.load(f)
    else:
        _worker_context = context
    gc.freeze()  # the context lives as long as the worker: no collection need ever walk it again


def _decide_in_worker(folders: tuple[str, ...]) -> tuple[list[_Decided], Counter[str]]:
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
        decide = functools.partial(_decide_apart, _worker_context)
        if len(folders) == 1:
            decided = [decide(folders[0])]
        else:
            with ThreadPoolExecutor(len(folders)) as pool:
                decided = list(pool.map(decide, folders))
    finally:
        gc.enable()
    return decided, calls.snapshot() - before


def _counted(storage: Storage, result: tuple[list[_Decided], Counter[str]]) -> list[_Decided]:
    decided, calls = result
    for kind, n in calls.items():
        storage.calls.add(kind, n)
    return decided


def planning_workers(storage: Storage, partitions: int, lister: Lister | None = None) -> int:
    """Worker processes to decide partitions in: deciding is Python work that one core bounds,
    and so, on object stores, is what botocore spends per request (a listed object, a GET). Used
    once a checkpoint has enough partitions to repay starting them; a lister given by a test
    stays in this process."""
    if lister not in (None, _list) or partitions < POLICY.plan_processes_from:
        return 0
    processes = min(POLICY.plan_processes, os.cpu_count() or 1)
    return processes if processes > 1 else 0


def partitions_at_once(storage: Storage, processes: int) -> int:
    """Partitions each process (or this one, without workers) decides at once: one on local disks,
    where a thread would only contend; on object stores enough, in threads, that `list_workers`
    partitions' requests are in flight in all, since a request's wait is latency, not CPU."""
    if storage.is_local:
        return 1
    return -(-POLICY.list_workers // max(processes, 1))


def _process_pool(context: _Context, workers: int) -> ProcessPoolExecutor:
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


def _in_order(
    context: _Context, folders: list[str], workers: int, spill: _Spill
) -> Iterator[tuple[str, _Decided]]:
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
        yield from ((folder, _decide(context, folder, spill.lines, spill.held)) for folder in folders)
        return
    pool: Executor
    work: Callable[[tuple[str, ...]], Any]
    take: Callable[[Any], list[_Decided]]
    if workers < 1:  # threads of this process, a partition each
        pool, width, per_unit = ThreadPoolExecutor(at_once), at_once, 1
        work, take = functools.partial(_decide_each, context), _same
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


def _decide_each(context: _Context, folders: tuple[str, ...]) -> list[_Decided]:
    return [_decide_apart(context, folder) for folder in folders]


def _same(decided: list[_Decided]) -> list[_Decided]:
    return decided


def _scan(
    base: Checkpoint,
    window: list[int],
    committed: dict[int, dict[StoreId, str]],
    files: tuple[CheckpointFile, ...],
    options: GcOptions,
    now: float,
) -> OrphanScan:
    """One partition decided alone: its stores' committed ids, lineages and zip listings."""
    index = FileIndex(files)  # built once: for the lineage reads here, then for the rules
    to_read: dict[str, CheckpointFile] = {}  # the committed changelogs: their lineage headers
    for batch, stores in committed.items():
        for sid, uid in stores.items():
            if index.get(sid, FileKind.ZIP, batch + 1, uid) is not None:
                continue
            changelog = index.get(sid, FileKind.CHANGELOG, batch + 1, uid)
            if changelog is not None:
                to_read[changelog.rel] = changelog
    lineages = {}
    for changelog, header in base.read_changelog_headers(list(to_read.values())):  # raises: fail closed
        if header.lineage is None:
            raise GcError("a V2 changelog without lineage", base.storage.full(changelog.rel))
        lineages[changelog.rel] = header.lineage
    zip_ssts = _ZipListings(base, {f.rel: f for f in index.of_kind[FileKind.ZIP]})
    try:
        scan = find_orphans(
            RetentionInputs(files, window[-1], dict(committed), lineages, zip_ssts), options, now, index
        )
    except UnsafeToPlan as exc:
        raise GcError(f"unsafe to plan: {exc}", base.url) from exc
    _guard_paths(base, [c.file for c in scan.candidates])
    return scan


class _ZipListings(Mapping[str, "tuple[str, ...] | None"]):
    """The SSTs each zip of a partition lists, read when first asked for: find_orphans asks only of
    the zips that stay, so the zips that go cost no request. An unreadable zip is None (fatal only
    if retained: find_orphans checks)."""

    def __init__(self, base: Checkpoint, zips: dict[str, CheckpointFile]) -> None:
        self._base, self._zips = base, zips
        self._read: dict[str, tuple[str, ...] | None] = {}

    def __getitem__(self, rel: str) -> tuple[str, ...] | None:
        if rel not in self._read:
            zip_file = self._zips[rel]  # KeyError: not a zip of this partition
            try:
                self._read[rel] = tuple(
                    s.dfs_name for s in self._base.read_snapshot(zip_file).metadata.sst_files
                )
            except CheckpointError:
                self._read[rel] = None
        return self._read[rel]

    def __iter__(self) -> Iterator[str]:
        return iter(self._zips)

    def __len__(self) -> int:
        return len(self._zips)


def _guard_paths(ckpt: Checkpoint, candidates: list[CheckpointFile]) -> None:
    """Inside `state/`, no `..`, and (on local disks) no symlink leading out of the checkpoint.

    One pass over the candidates, which share a few folders: each folder's path is checked once,
    and resolved once through one file of it that is no link (such a file is where its folder
    really is); each file the listing calls a link, or could not tell, is resolved itself."""
    checked: set[str] = set()
    represented: set[str] = set()
    resolve: list[FileInfo] = []
    for f in candidates:
        info = f.info
        folder, _, name = info.rel.rpartition("/")
        if folder not in checked:
            parts = folder.split("/")
            if parts[0] != "state" or ".." in parts or "" in parts:
                name = ""  # the path is refused as a whole
            checked.add(folder)
        if name in ("", ".."):
            raise GcError(f"refusing a path outside the checkpoint's state/ folder: {info.rel}", ckpt.url)
        if info.link is not False:
            resolve.append(info)
        elif folder not in represented:
            represented.add(folder)
            resolve.append(info)
    for rel, real in ckpt.storage.outside(resolve, "state").items():
        raise GcError(f"{rel} resolves to {real}, outside the state/ folder (a symlink?): nothing planned",
                      ckpt.url)  # fmt: skip


_PROGRESS_EVERY = 50_000  # files seen between progress lines
_LINES_PER_WRITE = 8192  # a partition's lines are written in chunks, never held whole


class _Spill:
    """Candidates as manifest lines in a local file, totals in memory. On a live query, the SSTs
    whose fate waits for the oldest retained SST of every partition (and their sidecars) go to a
    second file, decided in `finish`."""

    def __init__(self, tmp: str) -> None:
        self._lines_path = os.path.join(tmp, "candidates.jsonl")
        self.lines = open(self._lines_path, "w")  # closed in finish, or on the way out
        # Partitions decided in a pool: each one's lines file, in folder order. Named, not copied
        # here: the manifest is assembled from them once (at 10M files, 1.9 GB fewer to write).
        self._parts: list[str] = []
        self._held_path = os.path.join(tmp, "held.jsonl")
        self.held = open(self._held_path, "w")  # closed in finish, or on the way out
        self.retained = self.seen = 0
        self.by_reason, self.by_store = Totals(), Totals()
        self.kept: Counter[str] = Counter()
        self.floor: float | None = None  # the oldest SST any retained zip lists
        self.partition_files: dict[str, int] = {}

    @property
    def files(self) -> int:  # every candidate has one reason: the totals by reason are the whole
        return sum(entry["files"] for entry in self.by_reason.as_dict().values())

    @property
    def bytes(self) -> int:
        return sum(entry["bytes"] for entry in self.by_reason.as_dict().values())

    def __enter__(self) -> _Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.lines.close()
        self.held.close()

    def partition(self, folder: str, decided: _Decided) -> None:
        self.retained += decided.retained
        self.partition_files[folder] = decided.listed
        self.kept.update(decided.kept)
        oldest = decided.oldest_retained_sst
        if oldest is not None:
            self.floor = oldest if self.floor is None else min(self.floor, oldest)
        if decided.apart is not None:
            lines, held = decided.apart
            self._parts.append(lines)
            # As bytes: ASCII lines, not decoded and encoded again
            self.held.flush()
            with open(held, "rb") as part:
                shutil.copyfileobj(part, self.held.buffer)
            os.remove(held)
        self.by_reason.merge(decided.by_reason)
        self.by_store.merge(decided.by_store)
        before, self.seen = self.seen, self.seen + decided.listed
        if self.seen // _PROGRESS_EVERY > before // _PROGRESS_EVERY:
            seen = Progress("files planned", self.seen, None)
            report(log, seen, "%s: %d files seen, %d candidates (%d bytes)", folder, self.seen, self.files,
                   self.bytes)  # fmt: skip

    @property
    def line_files(self) -> list[str]:
        """The manifest's candidate lines, in order: each partition's (when decided in a pool), then
        this spill's own file (the partitions decided here, and the held SSTs decided last)."""
        return [*self._parts, self._lines_path]

    def _add(self, planned: PlannedFile) -> None:
        self.lines.write(planned.line())
        self.by_reason.add(planned.reason, planned.bytes)
        self.by_store.add(planned.store, planned.bytes)

    def finish(self) -> None:
        """Decides the held SSTs against the oldest retained SST of the whole checkpoint (none:
        every such SST stays), as docs/safety.md asks of a live query."""
        self.held.close()
        with open(self._held_path) as held:
            for line in held:
                row = json.loads(line)
                planned = PlannedFile.parse(row)
                if self.floor is not None and row["sst_mtime"] < self.floor:
                    self._add(planned)
                elif classify(planned.path).kind == FileKind.SST:
                    self.kept[Kept.LIVE_RECENT_SST.value] += 1
                else:
                    self.kept[Kept.MAIN_KEPT.value] += 1
        self.lines.close()  # flushed: the manifest is assembled from it
