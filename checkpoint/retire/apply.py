"""The apply of a retirement plan: the evidence checked again under the leases, the archive
forked and validated, then the checkpoint deleted, each step recorded as it ends (see the
package's docstring)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from checkpoint import bounds
from checkpoint.analysis import Severity, dormant_since, unfinished_batch, validate
from checkpoint.cleanup import delete_with_redrive
from checkpoint.crash import crash_point
from checkpoint.errors import NotACheckpointError, RetirementIncomplete, RetirementRefused
from checkpoint.fork import ForkOptions, fork_checkpoint, inspect_dest
from checkpoint.format import FileKind, classify
from checkpoint.model import is_checkpoint, load_head, untrusted_files
from checkpoint.policy import POLICY, duration_text
from checkpoint.retire.manifest import RetirementPlan, manifest_rel, outcomes_rel, planned_files, when
from checkpoint.retire.plan import nested_holders, refuse_nested, sides
from checkpoint.retire.record import (
    PlanRecord,
    deletion_began,
    folder_of,
    mark_deleting,
    read_record,
)
from checkpoint.safety import AuditTrail, InPlace, TwoSided, held_by, sha256_of
from checkpoint.storage import DELETE_MAX_KEYS, FileInfo, Storage, normalize_url

log = logging.getLogger(__name__)
ARCHIVED, DELETING, DELETED, RETIRED = "archived", "deleting", "deleted", "retired"
_FAILED_KEPT = 20  # failures named per batch record; all are counted
# How far the storage's clock (a file's mtime) may run ahead of the planner's (the plan's time).
_CLOCKS_APART = 60.0


@dataclass(frozen=True)
class RetireOptions:
    plan: RetirementPlan  # as read back and proven (`manifest.read_retirement`)
    now: float  # the time the grace period is counted to (a manual clock in tests)
    grace_seconds: float = POLICY.retire_grace_seconds
    allow_short_grace: bool = False
    batch_size: int = POLICY.delete_batch_size
    approved_by: str = ""  # who launched the apply: the approval, recorded


@dataclass(frozen=True)
class Retired:
    plan_id: str
    checkpoint: str
    archive: str | None
    archived_batch: int | None
    deleted_files: int  # by this run
    deleted_bytes: int
    already_retired: bool
    approved_by: str
    outcomes: str
    requests: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def apply_retirement(request: InPlace | TwoSided, options: RetireOptions) -> Retired:
    """Applies `options.plan` to the checkpoint behind `request`, archiving to its DEST when it is
    two-sided (the plan's archive; in place, the plan must name none). Raises RetirementRefused
    (nothing deleted) or RetirementIncomplete (the same call finishes).

    The manifest is a handback: a person read it, and anyone who can write the audit trail could
    have edited it. It counts only as far as it matches the plan's record beside the checkpoint
    (`record`), the grace runs from that record's time, and everything the plan judged (a
    checkpoint, dormant, holding no other, its files as listed) is judged again now, under the
    leases. Once deletion began (its marker beside the checkpoint), the archive is read back and
    validated before each run deletes more."""
    checkpoint, archive = sides(request)
    trail, plan, now = request.audit_trail(), options.plan, options.now
    started, before = time.monotonic(), _requests(checkpoint, archive, trail)
    _refuse_early(checkpoint, archive, plan, options)
    record = read_record(checkpoint, plan, now)
    _refuse_within_grace(record, plan, options, now)
    rel = outcomes_rel(plan)
    with tempfile.TemporaryDirectory(prefix="ckpt-retire-") as tmp:
        manifest = _verified_manifest(trail, plan, record, tmp)
        with request.held("retire --apply") as check:
            archived, deleted, already = _retire(
                checkpoint, archive, record, manifest, trail, options, rel, check
            )
    return Retired(
        plan_id=plan.plan_id, checkpoint=plan.checkpoint, archive=plan.archive,
        archived_batch=None if archived is None else archived.get("batch"),
        deleted_files=deleted[0], deleted_bytes=deleted[1], already_retired=already,
        approved_by=options.approved_by, outcomes=f"{trail.url}/{rel}",
        requests=_requests(checkpoint, archive, trail) - before, seconds=round(time.monotonic() - started, 3),
    )  # fmt: skip


def _retire(
    checkpoint: Storage,
    archive: Storage | None,
    record: PlanRecord,
    manifest: str,
    trail: AuditTrail,
    options: RetireOptions,
    rel: str,
    check: Callable[[], None],
) -> tuple[dict | None, tuple[int, int], bool]:
    """Under the leases: (the archive's record, (files, bytes) deleted by this run, whether an
    earlier run had retired it all). The checkpoint is worked on where it was planned: its place
    resolved (a link repointed since is not followed) and, where folders have them, the folder's
    device and inode the plan recorded."""
    plan, now = options.plan, options.now
    here = checkpoint.resolved()
    done = _TrailSoFar.of(trail, rel)
    marker = deletion_began(checkpoint, plan)
    pages = _pages(here)
    first = next(pages, None)
    if first is None and done.retired:
        return done.archived, (0, 0), True
    if first is not None:  # a folder gone (a run killed at its very end) is no other folder
        _refuse_moved(here, record)
    present = _recheck(here, manifest, plan, itertools.chain([first] if first else [], pages),
                       deleting=marker is not None, planned_at=record.planned_at)  # fmt: skip
    refuse_nested(here, present.holders)
    if marker is None:
        _refuse_not_dormant(here, record, now)
    archived = _archived(here, archive, plan, check, marker)
    if archived is not None and done.archived is None:
        crash_point("retire.archived")
        trail.append_records(rel, [archived])
    if marker is None:
        mark_deleting(checkpoint, plan, now, archived)
        trail.append_records(rel, [{"step": DELETING, "approved_by": options.approved_by,
                                    "files": present.files}])  # fmt: skip
    elif unrecorded := _unrecorded(plan, present, done):
        trail.append_records(rel, [unrecorded])
    deleted = _delete(here, manifest, plan, present, trail, rel, options, check, record.folder)
    trail.append_records(rel, [{"step": RETIRED, "approved_by": options.approved_by}])
    trail.seal_records(rel)
    log.info("%s: retired (plan %s)", checkpoint.url, plan.plan_id)
    return archived, deleted, False


def _refuse_moved(here: Storage, record: PlanRecord) -> None:
    if record.folder is not None and folder_of(here) != record.folder:
        raise RetirementRefused("the checkpoint's folder is not the one planned (another folder was put "
                                "in its place): nothing deleted, plan again", here.url)  # fmt: skip


@dataclass(frozen=True)
class _TrailSoFar:
    """What earlier runs of this apply recorded, read a record at a time: whether one retired it
    all, the archive one made, and the files and bytes the recorded batches deleted."""

    retired: bool
    archived: dict | None
    files: int
    bytes: int

    @staticmethod
    def of(trail: AuditTrail, rel: str) -> _TrailSoFar:
        retired, archived, files, size = False, None, 0, 0
        try:
            for r in trail.each_record(rel):
                step = r.get("step")
                retired = retired or step == RETIRED
                archived = r if step == ARCHIVED and archived is None else archived
                if step == DELETED:
                    files += bounds.count(r.get("files", 0), "files")
                    size += bounds.count(r.get("bytes", 0), "bytes")
        except bounds.OutOfRange as exc:
            raise RetirementRefused(f"a record of this apply is not one it wrote ({exc}): look at it; "
                                    "nothing deleted", f"{trail.url}/{rel}") from exc  # fmt: skip
        return _TrailSoFar(retired, archived, files, size)


def _unrecorded(plan: RetirementPlan, present: _Present, done: _TrailSoFar) -> dict | None:
    """What a killed run deleted and had not recorded yet (gone from the checkpoint, and in no
    record of a batch): recorded by the run that finds it, so the records add up to the plan."""
    files = plan.files - present.files - done.files
    size = plan.total_bytes - present.bytes - done.bytes
    if files <= 0:
        return None
    return {"step": DELETED, "files": files, "bytes": size, "failed_files": 0, "failed": [],
            "why": "deleted by a run killed before it recorded them"}  # fmt: skip


def _requests(checkpoint: Storage, archive: Storage | None, trail: AuditTrail) -> int:
    return checkpoint.calls.total() + trail.storage.calls.total() + (archive.calls.total() if archive else 0)


def _refuse_early(
    checkpoint: Storage, archive: Storage | None, plan: RetirementPlan, options: RetireOptions
) -> None:
    """What refuses before anything is read or taken: another checkpoint or archive than the
    plan's, a batch size out of range, a grace under the floor or not a number."""
    if checkpoint.url != plan.checkpoint or (None if archive is None else archive.url) != plan.archive:
        raise RetirementRefused(f"the plan retires {plan.checkpoint} (archive {plan.archive}), not "
                                f"{checkpoint.url}", plan.manifest)  # fmt: skip
    if not 1 <= options.batch_size <= DELETE_MAX_KEYS:
        raise RetirementRefused(f"a delete batch holds 1 to {DELETE_MAX_KEYS} keys, not {options.batch_size}",
                                plan.manifest)  # fmt: skip
    try:
        bounds.seconds(options.grace_seconds, "the grace")
        bounds.instant(options.now, "the time of the apply")
    except bounds.OutOfRange as exc:
        raise RetirementRefused(f"{exc}: nothing deleted", plan.manifest) from exc
    floor = POLICY.min_retire_grace_seconds
    if options.grace_seconds < floor and not options.allow_short_grace:
        raise RetirementRefused(f"a grace of {duration_text(options.grace_seconds)} is below the floor of "
                                f"{duration_text(floor)} (--unsafe-short-grace)", plan.manifest)  # fmt: skip


def _refuse_within_grace(
    record: PlanRecord, plan: RetirementPlan, options: RetireOptions, now: float
) -> None:
    """The grace runs from the plan's own record (a finite time, no later than its plan id says),
    never from a file's mtime, which anyone who can write the trail can set."""
    if now < record.planned_at + options.grace_seconds:
        raise RetirementRefused(
            f"planned {when(record.planned_at)}: within its grace of {duration_text(options.grace_seconds)}, "
            f"nothing is deleted before {when(record.planned_at + options.grace_seconds)}",
            plan.manifest,
        )
    # The record is a file beside the checkpoint, which someone could have written: a dormancy
    # below the floor is what a plan makes only when told it is unsafe, and so is its apply.
    floor = POLICY.min_dormant_seconds
    if record.dormant_seconds < floor and not options.allow_short_grace:
        raise RetirementRefused(
            f"planned with a dormancy of {duration_text(record.dormant_seconds)}, below the floor of "
            f"{duration_text(floor)} (--unsafe-short-grace): nothing deleted",
            plan.manifest,
        )


def _verified_manifest(trail: AuditTrail, plan: RetirementPlan, record: PlanRecord, folder: str) -> str:
    """The manifest copied to the local `folder`, its sha256 the record's: the apply reads its
    lines from this copy, so what it checked is what it deletes by. Raises RetirementRefused."""
    rel = manifest_rel(plan.checkpoint, plan.plan_id)
    info = trail.storage.stat(rel)
    if info is None or info.size != record.manifest_bytes:
        found = "gone" if info is None else f"{info.size} bytes"
        raise RetirementRefused(f"the manifest is not the one planned ({found}, its record "
                                f"{record.manifest_bytes} bytes): edited or replaced; nothing "
                                "deleted, plan again", plan.manifest)  # fmt: skip
    local = os.path.join(folder, "manifest.jsonl")
    trail.storage.download(rel, local, size=info.size)
    found = sha256_of(local)
    if found != record.manifest_sha256:
        raise RetirementRefused(f"the manifest is not the one planned (sha256 {found[:12]}..., its record "
                                f"{record.manifest_sha256[:12]}...): edited or replaced; nothing deleted, "
                                "plan again", plan.manifest)  # fmt: skip
    return local


@dataclass
class _Present:
    """What the checkpoint holds now, counted as its listing is checked against the manifest: the
    apply's memory is a page of the listing and a name per folder, never its files."""

    files: int = 0
    bytes: int = 0
    folders: set[str] = dataclasses.field(default_factory=lambda: {""})  # "" is the checkpoint's own
    holders: set[str] = dataclasses.field(default_factory=set)  # `nested_holders`


def _recheck(
    checkpoint: Storage,
    manifest: str,
    plan: RetirementPlan,
    pages: Iterable[list[FileInfo]],
    *,
    deleting: bool,
    planned_at: float,
) -> _Present:
    """Each file the checkpoint holds now is one the manifest lists with its size and mtime,
    written before the plan (its record's time), and one Spark writes (no link out, no FIFO);
    refused on any other, or on one the manifest lists and the checkpoint lost, unless this plan's
    deletion began (then what is gone is what it deleted). A manifest that lists a file written
    after its own plan is forged, whatever else it matches."""
    present, untrusted, newest = _Present(), None, None
    for page in _matching(checkpoint, manifest, plan, pages, deleting=deleting, strict=True):
        for f in page:
            if f.mtime is not None and f.mtime > planned_at + _CLOCKS_APART and newest is None:
                newest = f
        present.files += len(page)
        present.bytes += sum(f.size for f in page)
        present.folders.update(f.rel.rsplit("/", i)[0] for f in page for i in range(1, f.rel.count("/") + 1))
        present.holders |= nested_holders(page)
        if untrusted is None and (found := untrusted_files(checkpoint, page)):
            untrusted = min(found), found[min(found)]
    if not present.files and not deleting:
        raise RetirementRefused("the checkpoint is gone, and no run of this plan deleted it", checkpoint.url)
    if untrusted is not None:  # what the plan refused, judged again on the files there now
        raise RetirementRefused(f"{untrusted[1]}: a file Spark never writes; nothing deleted", untrusted[0])
    if newest is not None:
        _refuse_written(checkpoint, plan, newest.rel, deleting=deleting)
    return present


def _matching(
    checkpoint: Storage,
    manifest: str,
    plan: RetirementPlan,
    pages: Iterable[list[FileInfo]],
    *,
    deleting: bool,
    strict: bool,
) -> Iterator[list[FileInfo]]:
    """The listed files, a page at a time, merged with the manifest's (both in order of path: a
    manifest out of order refuses, since a file then looks new). `strict`: refused on a file it
    does not list with that size and mtime, or, unless `deleting`, on one it lists that is gone;
    else such a file is left out (it stays, for the listing after the deletion to name)."""
    planned = planned_files(manifest, plan)
    want, gone = next(planned, None), None
    for page in pages:
        out = []
        for f in page:
            while want is not None and want[0] < f.rel:
                gone = gone or want[0]
                want = next(planned, None)
            if want is not None and want[0] == f.rel and (f.size, f.mtime) == want[1:]:
                out.append(f)
                want = next(planned, None)
            elif strict:
                _refuse_written(checkpoint, plan, f.rel, deleting=deleting)
            elif want is not None and want[0] == f.rel:
                want = next(planned, None)
        if out:
            yield out
    while want is not None:  # to its end: a manifest longer than its header says refuses
        gone = gone or want[0]
        want = next(planned, None)
    if strict and gone is not None and not deleting:
        raise RetirementRefused(f"{gone}, which the plan lists, is gone: something changed the checkpoint "
                                "since the plan; plan again", checkpoint.url)  # fmt: skip


def _refuse_not_dormant(checkpoint: Storage, record: PlanRecord, now: float) -> None:
    """The checkpoint judged as the plan judged it, now: a checkpoint, no batch left unfinished,
    dormant for the plan's period, its last commit the plan's."""
    if not is_checkpoint(checkpoint.list_dir(""), ""):
        raise RetirementRefused("not a checkpoint (no metadata with offsets/ or commits/): nothing deleted",
                                checkpoint.url)  # fmt: skip
    ckpt = load_head(checkpoint, strict=False)
    unfinished = unfinished_batch(ckpt)
    if unfinished is not None:
        raise RetirementRefused(f"batch {unfinished} was planned and never committed: not dormant as "
                                "planned; nothing deleted", checkpoint.url)  # fmt: skip
    if dormant_since(ckpt, now, record.dormant_seconds) is None:
        raise RetirementRefused(f"not dormant: its newest commit or offset was written "
                                f"{when(ckpt.last_activity_mtime)}; nothing deleted",
                                checkpoint.url)  # fmt: skip
    if ckpt.latest_committed_batch != record.last_commit:
        raise RetirementRefused(f"its last commit is batch {ckpt.latest_committed_batch}, the plan's "
                                f"{record.last_commit}: nothing deleted, plan again",
                                checkpoint.url)  # fmt: skip


def _refuse_written(checkpoint: Storage, plan: RetirementPlan, rel: str, *, deleting: bool) -> NoReturn:
    what = classify(rel)
    if what.kind in (FileKind.COMMIT, FileKind.OFFSET):
        written = f"{'commit' if what.kind == FileKind.COMMIT else 'offset'} {what.batch} was written"
    else:
        written = f"{rel} was written or changed"
    if deleting:  # an earlier run deleted part of it: a new plan would not find a checkpoint
        raise RetirementRefused(f"{written} since the plan ({when(plan.planned_at)}), after an earlier run "
                                "of this apply began deleting: nothing more deleted; look at what is left "
                                "(the audit trail names what was deleted)", checkpoint.url)  # fmt: skip
    raise RetirementRefused(f"{written} since the plan ({when(plan.planned_at)}): the checkpoint is not "
                            "dormant as planned; nothing deleted, plan again", checkpoint.url)  # fmt: skip


def _archived(
    checkpoint: Storage,
    archive: Storage | None,
    plan: RetirementPlan,
    check: Callable[[], None],
    marker: dict | None,
) -> dict | None:
    """The archive, proven before anything (more) is deleted: before deletion began, the latest
    committed batch forked to it (resumed, or a no-op when complete) and validated; after, read back
    as it is and validated, and it must be the fork this plan's deletion began with (the source,
    the batch and the query id its marker beside the checkpoint names), since the checkpoint it
    came from is partly gone and no record in the trail is taken for it. None without an archive."""
    if archive is None:
        return None
    if marker is None:
        result = fork_checkpoint(
            TwoSided(checkpoint, archive, held_by(check), dest_is="the archive"),
            ForkOptions(what="retirement archive"),
        )
        batch, query_id, files, size = result.batch, result.query_id, result.files, result.total_bytes
    else:
        state, made = inspect_dest(archive), marker.get("archived") or {}
        done, started = state.complete, state.started
        if done is None or started is None:
            raise RetirementRefused(
                f"the archive {archive.url} is {'incomplete' if state.files else 'gone'}, and this plan's "
                "deletion began: nothing more is deleted; put the archive back (or fork what the "
                "checkpoint still holds elsewhere), then run the same apply again", checkpoint.url,
            )  # fmt: skip
        if normalize_url(started.source) != plan.checkpoint or done.query_id != made.get("query_id"):
            raise RetirementRefused(
                f"the archive {archive.url} is not the one this plan's deletion began with (a fork of "
                f"{started.source}, query {done.query_id}; the marker names query {made.get('query_id')}): "
                "nothing more is deleted; put that archive back, then run the same apply again",
                checkpoint.url,
            )  # fmt: skip
        batch, query_id, files, size = done.batch, done.query_id, done.files, done.total_bytes
    if batch != plan.evidence.last_commit:
        raise RetirementRefused(f"the archive holds batch {batch}, the plan's last commit is "
                                f"{plan.evidence.last_commit}: nothing deleted", archive.url)  # fmt: skip
    errors = [f for f in validate(load_head(archive, strict=True)).findings if f.severity == Severity.ERROR]
    if errors:
        raise RetirementRefused(f"the archive fails validation ({errors[0].code}: {errors[0].message}): "
                                "nothing deleted", archive.url)  # fmt: skip
    log.info("%s: archived at batch %d in %s (read back and validated)", checkpoint.url, batch, archive.url)
    return {"step": ARCHIVED, "archive": archive.url, "batch": batch, "files": files, "bytes": size,
            "query_id": query_id}  # fmt: skip


def _delete(
    checkpoint: Storage,
    manifest: str,
    plan: RetirementPlan,
    present: _Present,
    trail: AuditTrail,
    rel: str,
    options: RetireOptions,
    check: Callable[[], None],
    root: tuple[int, ...] | None,
) -> tuple[int, int]:
    """Deletes the files listed now that the manifest lists as they are, a batch at a time (one
    request each on S3) as the listing comes, through the folders as they were when checked (a
    folder swapped for a link mid-way is not gone through), the lease checked before each batch
    and each batch recorded; then the folders, the checkpoint's own last. A file the manifest does
    not list (one that appeared under the lease) is never deleted: it is left, and named."""
    parent = checkpoint.parent()  # before the first delete: a plan refused a checkpoint without one
    held = checkpoint.folder_ids(sorted(present.folders))
    if root is not None and present.files and tuple(held.get("", ())) != root:  # swapped since the listing
        raise RetirementRefused(
            "the checkpoint's folder is not the one planned: nothing deleted", checkpoint.url
        )
    files = bytes_ = 0
    failed: dict[str, str] = {}
    listed = _matching(checkpoint, manifest, plan, _pages(checkpoint), deleting=True, strict=False)
    for chunk in _batches(listed, options.batch_size):
        check()
        rels = [f.rel for f in chunk]
        why = delete_with_redrive(checkpoint, rels, POLICY.delete_attempts, time.sleep, held)
        ok = [f for f in chunk if f.rel not in why]
        files, bytes_ = files + len(ok), bytes_ + sum(f.size for f in ok)
        failed.update(why)
        crash_point("retire.deleted", files)
        trail.append_records(rel, [{
            "step": DELETED, "first": chunk[0].rel, "last": chunk[-1].rel, "files": len(ok),
            "bytes": sum(f.size for f in ok), "failed_files": len(why),
            "failed": [{"path": p, "why": w} for p, w in list(why.items())[:_FAILED_KEPT]],
        }])  # fmt: skip
    if failed:
        path, why_ = next(iter(failed.items()))
        raise RetirementIncomplete(f"{len(failed)} file(s) not deleted (first: {path}: {why_}); every "
                                   "outcome is in the audit trail: run the same apply again",
                                   checkpoint.url)  # fmt: skip
    name = checkpoint.root.rstrip("/").rsplit("/", 1)[-1]
    parent.remove_empty_folders([f"{name}/{f}" if f else name for f in _folders(checkpoint)])
    left, first = 0, None
    for page in _pages(checkpoint):
        left, first = left + len(page), first or page[0].rel
    if left:
        raise RetirementIncomplete(f"{left} file(s) appeared while it was deleted (e.g. {first}): "
                                   "look at them; nothing of them was deleted", checkpoint.url)  # fmt: skip
    return files, bytes_


def _pages(storage: Storage) -> Iterator[list[FileInfo]]:
    """The checkpoint's files a page at a time; none once it is gone."""
    try:
        yield from storage.pages()
    except NotACheckpointError:
        return


def _batches(pages: Iterable[list[FileInfo]], size: int) -> Iterator[list[FileInfo]]:
    """The files of `pages` regrouped `size` at a time."""
    batch: list[FileInfo] = []
    for page in pages:
        for f in page:
            batch.append(f)
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


def _folders(storage: Storage) -> list[str]:
    """Every folder left under the root ("" included), a shallow listing each: after the files
    went, only empty ones (Spark makes some it never fills)."""
    found, todo = [""], [""]
    while todo:
        listing = storage.list_dir(todo.pop())
        found += listing.folders
        todo += listing.folders
    return found
