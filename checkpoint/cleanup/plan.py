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

import logging
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

from checkpoint.analysis import Category, Severity, ValidationOptions, validate
from checkpoint.cleanup.decide import Context, Lister, list_folder, scan_partition
from checkpoint.cleanup.pool import in_order, planning_workers
from checkpoint.cleanup.rules import (
    GcOptions,
)
from checkpoint.cleanup.spill import Spill
from checkpoint.errors import GcError
from checkpoint.format import FileKind, StateAction, classify
from checkpoint.model import (
    Checkpoint,
    CheckpointFile,
    StateFolders,
    StoreId,
    build_checkpoint,
    maintained_batches,
    state_partition_folders,
    store_ids,
)
from checkpoint.policy import POLICY
from checkpoint.safety import InPlace, Plan, PlannedFile, new_plan_id
from checkpoint.storage import Storage

log = logging.getLogger(__name__)


def commit_digests(ckpt: Checkpoint) -> dict[int, str]:
    """Digests of the very commit files the plan was computed from (no second read, no race)."""
    return {b.id: b.commit.digest for b in ckpt.batches.values() if b.commit is not None}


@dataclass(frozen=True)
class GcPlanOptions:
    grace_seconds: float = POLICY.grace_seconds  # only files older than this are candidates
    retain_batches: int | None = None  # keep what the last N committed batches read; None: the window
    quiet_seconds: float = POLICY.quiet_seconds  # a commit or offset newer than this: live
    now: float | None = None  # a manual clock; None: the time
    allow_short_grace: bool = False  # a grace under the floor, where nothing writes to the checkpoint
    # The caller knows the query stopped (`--query-stopped`): the stopped-query rules once its logs
    # are older than the quiet period, else the live rules.
    query_stopped: bool = False
    workers: int | None = None  # partitions decided at once; None: as many as repay their start
    # Lists one partition folder, sorted by path as `Storage.list_files` gives it (tests give one
    # that drops mtimes, as some backends do).
    lister: Lister = list_folder


def plan_gc(request: InPlace, options: GcPlanOptions = GcPlanOptions()) -> Plan:
    """Plans the cleanup of the checkpoint behind `request` and writes its manifest to the
    request's audit trail; raises GcError when planning is unsafe. Takes no lease: the request's
    is its apply's. The manifest lists each kind in the lister's order.

    A query is planned under the live rules (two versions of margin, SSTs only below the oldest
    a retained zip lists: a running executor may reuse one) unless the caller knows it stopped
    (`query_stopped`): a running query idle for longer than the quiet period looks stopped by
    its logs alone. Logs newer than the quiet period make it live whatever the caller says."""
    o = options
    storage, audit = request.storage, request.audit_trail()
    now = time.time() if o.now is None else o.now
    # A plan no apply could carry out, or a manifest inside the checkpoint (a file its metadata
    # does not name): refused before anything is written.
    request.check_place()
    if o.grace_seconds < POLICY.min_grace_seconds and not o.allow_short_grace:
        raise GcError(
            f"a grace period of {o.grace_seconds:.0f} s is below {POLICY.min_grace_seconds / 60:g} minutes: "
            "files of a batch still being written could be deleted. Override only if nothing writes to "
            "this checkpoint",
            storage.url,
        )
    if o.retain_batches is not None and o.retain_batches < 1:
        raise GcError("--retain-batches must be at least 1", storage.url)
    base, folders, window, committed = _read_logs(storage, o.retain_batches)
    live = not o.query_stopped or base.is_live(now, o.quiet_seconds)
    rules = GcOptions(grace_seconds=o.grace_seconds, live=live, defer_live_ssts=True)
    auto = o.workers is None  # else the caller's (a test's, a bench's): started as given
    workers = planning_workers(storage, len(folders), o.lister) if o.workers is None else o.workers
    plan_id = new_plan_id(now)
    with tempfile.TemporaryDirectory(prefix="ckpt-plan-") as tmp, Spill(tmp) as spill:
        context = Context(base, window, dict(committed), rules, now, o.lister, tmp)
        for folder, decided in in_order(context, folders, workers, spill, until_worth_it=auto):
            spill.partition(folder, decided)
        spill.finish()
        plan = Plan(
            plan_id=plan_id,
            checkpoint=storage.url,
            planned_at=now,
            against_batch=window[-1],
            latest_planned_batch=base.latest_planned_batch,
            live=live,
            grace_seconds=o.grace_seconds,
            retain_batches=o.retain_batches,
            commit_digests=commit_digests(base),
            files=spill.files,
            total_bytes=spill.total_bytes,
            by_reason=spill.by_reason.as_dict(),
            by_store=spill.by_store.as_dict(),
            retained_files=spill.retained,
            kept=dict(sorted(spill.kept.items())),
            partition_files=spill.partition_files,
            sst_floor=spill.floor if live else None,
            quiet_seconds=o.quiet_seconds,
            folder_ids=storage.folder_ids(_with_parents(spill.partition_files)),
        )
        return audit.write_manifest(plan, spill.line_files)


def _read_logs(
    storage: Storage, retain_batches: int | None
) -> tuple[Checkpoint, list[str], list[int], dict[str, dict[int, dict[StoreId, str | None]]]]:
    """(the checkpoint's logs, its partition folders, the retained batches, each partition's
    committed ids over them): everything outside `state/<op>/<part>/`, listed and read strictly."""
    folders = state_partition_folders(storage)
    inside = tuple(f + "/" for f in folders)
    outside = [f for f in storage.list_outside(folders) if not f.rel.startswith(inside)]
    partitions: dict[int, set[int]] = defaultdict(set)
    for folder in folders:  # state/<op>/<part>
        partitions[int(folder.split("/")[1])].add(int(folder.split("/")[2]))
    seen = {op: StateFolders(frozenset(parts)) for op, parts in partitions.items()}
    base = build_checkpoint(storage, CheckpointFile.of_listing(outside), strict=True, state_folders=seen)
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
        scan = scan_partition(self._base, self._window, self._committed.get(folder, {}), listing,
                              self._options, self._now)  # fmt: skip
        self._folder = folder
        self._listed = frozenset(f.info.rel for f in listing)
        self._candidates = frozenset(c.rel for c in scan.candidates if c.rel not in scan.held_for_floor)
        self._held = dict(scan.held_for_floor)

    def _refuse(self, path: str, why: str) -> NoReturn:
        raise GcError(f"plan {self._plan.plan_id} refused, nothing deleted: its manifest names {path}, {why}",
                      self._plan.manifest)  # fmt: skip


# What a plan may name: the state files the rules decide. Never a log, metadata or schema file.
_DELETABLE = frozenset({FileKind.ZIP, FileKind.CHANGELOG, FileKind.DELTA, FileKind.SNAPSHOT, FileKind.SST,
                        FileKind.WAL_LOG, FileKind.SPARK_CRC, FileKind.HADOOP_CRC, FileKind.MAINT_TEMP,
                        FileKind.SPARK_TEMP})  # fmt: skip


def _with_parents(folders: Iterable[str]) -> list[str]:
    """Each folder and every folder above it, the checkpoint's own ("") included."""
    out = {""}
    for folder in folders:
        parts = folder.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(out)


def _window(base: Checkpoint, retain_batches: int | None) -> list[int]:
    """The retained batches, once the logs proved sound."""
    if base.operators:
        base.states.refuse(StateAction.CLEANUP, base.url)
    logs_only = ValidationOptions(categories=frozenset({Category.COMMIT_LOG}))
    errors = [f for f in validate(base, logs_only).findings if f.severity == Severity.ERROR]
    if errors:
        raise GcError(
            "the commit log is inconsistent: " + "; ".join(f"{f.code} {f.message}" for f in errors), base.url
        )
    committed = maintained_batches(base)
    if not committed:
        raise GcError("no committed batch: nothing can be told apart from a batch in flight", base.url)
    return committed[-retain_batches:] if retain_batches else committed


def _committed_by_partition(
    base: Checkpoint, window: list[int], folders: list[str]
) -> dict[str, dict[int, dict[StoreId, str | None]]]:
    """Partition folder -> batch -> store -> committed id (None in format V1, whose names carry
    none), over the window: the one input of the retained set that spans partitions, as large as
    retained batches x stores. A store the latest batch committed must have its partition folder:
    a missing one stops the plan (fail closed)."""
    out: dict[str, dict[int, dict[StoreId, str | None]]] = defaultdict(lambda: defaultdict(dict))
    for batch in window:
        for sid in store_ids(base, batch):
            uid = base.committed_unique_id(batch, sid)
            base.states.refuse_unnamed(
                uid,
                StateAction.CLEANUP,
                lambda: f"batch {batch} names no committed id for {sid}",  # noqa: B023 - called at once
                base.storage.full(f"commits/{batch}"),
            )
            out[f"state/{sid.operator}/{sid.partition}"][batch][sid] = uid
    missing = sorted(set(out) - set(folders), key=lambda f: [int(p) for p in f.split("/")[1:]])
    latest = [f for f in missing if window[-1] in out[f]]
    if latest:
        raise GcError(f"unsafe to plan: {latest[0]} holds stores that batch {window[-1]} committed, and is "
                      "missing", base.url)  # fmt: skip
    return {folder: dict(batches) for folder, batches in out.items()}  # plain dicts: sent to workers
