"""The retirement plan: a dormant checkpoint's evidence, files and archive, written as a manifest in
the audit trail (see the package's docstring)."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from typing import BinaryIO

from checkpoint import bounds
from checkpoint.analysis import dormant_since, unfinished_batch
from checkpoint.errors import CheckpointError, RetirementRefused, StorageError
from checkpoint.fork import inspect_dest, read_source
from checkpoint.format import FileKind
from checkpoint.model import is_checkpoint, load_head, untrusted_files
from checkpoint.policy import POLICY, duration_text
from checkpoint.retire.manifest import Evidence, RetirementPlan, file_line, manifest_rel, manifest_url, when
from checkpoint.retire.record import write_record
from checkpoint.safety import (
    AuditTrail,
    InPlace,
    TakeLease,
    TwoSided,
    folder_name,
    new_plan_id,
    refuse_inside,
    refuse_overlap,
    sha256_of,
)
from checkpoint.storage import FileInfo, Storage

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------
# The plan


def retirement_request(
    checkpoint: Storage, archive: Storage | None, take: TakeLease, trail: AuditTrail
) -> InPlace | TwoSided:
    """The door a retirement goes through, its plan and its apply: to its archive, or in place
    without one; `trail`, where the plan is and its records go."""
    if archive is None:
        return InPlace(checkpoint, take, trail)
    return TwoSided(checkpoint, archive, take, trail, dest_is="the archive")


def sides(request: InPlace | TwoSided) -> tuple[Storage, Storage | None]:
    """(the checkpoint, its archive or None) behind a retirement's request."""
    return (request.storage, None) if isinstance(request, InPlace) else (request.src, request.dest)


@dataclasses.dataclass(frozen=True)
class RetirementPlanOptions:
    now: float | None = None  # a manual clock; None: the time
    dormant_seconds: float = POLICY.dormant_seconds  # no commit and no offset for this long: dormant
    allow_short: bool = False  # a dormancy under the floor (a day), where nothing writes to it


def plan_retirement(request: InPlace | TwoSided, options: RetirementPlanOptions) -> RetirementPlan:
    """Writes the retirement manifest of the dormant checkpoint behind `request` to its trail
    (takes no lease: the request's are its apply's); raises RetirementRefused (nothing written)
    for one that is not dormant, not a checkpoint, holds another, or holds a file Spark never
    writes. An in-place request is a retirement without an archive, which the caller was told to
    say. A dormancy period under the floor (a day) is refused unless `allow_short`: a query
    committed minutes ago is not dormant."""
    (storage, archive), trail = sides(request), request.audit_trail()
    dormant_seconds = options.dormant_seconds
    now = time.time() if options.now is None else options.now
    for place in (storage, archive):  # a plan no apply could carry out: refused before it is written
        if place is not None:
            place.refuse_writes()
    try:
        bounds.seconds(dormant_seconds, "the dormancy period", low=1.0)
    except bounds.OutOfRange as exc:
        raise RetirementRefused(f"{exc}: nothing planned", storage.url) from exc
    floor = POLICY.min_dormant_seconds
    if dormant_seconds < floor and not options.allow_short:
        raise RetirementRefused(f"a dormancy of {duration_text(dormant_seconds)} is below the floor of "
                                f"{duration_text(floor)} (--unsafe-short-grace): nothing planned",
                                storage.url)  # fmt: skip
    try:
        storage.parent()  # its folders are removed through the folder that holds it
    except StorageError as exc:
        raise RetirementRefused(
            "a checkpoint at the top of a bucket is a root, never retired", storage.url
        ) from exc
    # Its manifest and records in the checkpoint would be files the apply finds unplanned, forever;
    # in the archive, they would leave it not empty, which the apply's fork refuses.
    refuse_inside(storage, trail.storage, "the audit trail")
    if archive is not None:
        # The plan's manifest in the archive (the trail in it, or the archive in the trail's folder
        # the plan writes to) leaves it not empty, and no apply could fork into it.
        refuse_inside(archive, trail.storage, "the audit trail", "the archive")
        refuse_inside(trail.storage.child(folder_name(storage.url)), archive, "the archive",
                      "the audit trail's folder of this checkpoint")  # fmt: skip
    top = storage.list_dir("")
    if not is_checkpoint(top, ""):
        raise RetirementRefused("not a checkpoint (no metadata with offsets/ or commits/): nothing retired",
                                storage.url)  # fmt: skip
    ckpt = load_head(storage, strict=False)
    unfinished = unfinished_batch(ckpt)
    if unfinished is not None:
        raise RetirementRefused(
            f"batch {unfinished} was planned and never committed: the query stopped mid-batch, not "
            "after its last batch; restart it to finish the batch, or retire it once it has",
            storage.url,
        )
    since = dormant_since(ckpt, now, dormant_seconds)
    if since is None:
        last = ckpt.last_activity_mtime
        raise RetirementRefused(
            f"not dormant: its newest commit or offset was written {when(last)}, and a checkpoint is "
            f"dormant after {duration_text(dormant_seconds)} without either",
            storage.url,
        )
    if archive is not None:
        refuse_overlap(storage, archive, "the archive")
        held = inspect_dest(archive)
        if held.files and held.started is None:
            raise RetirementRefused(f"the archive is not empty ({len(held.files)} files)", archive.url)
        read_source(storage)  # what the fork at the apply would refuse is refused now
    commits = [f for f in ckpt.files if f.kind == FileKind.COMMIT]
    offsets = [f for f in ckpt.files if f.kind == FileKind.OFFSET]
    newest_commit = max(commits, key=lambda f: f.what.batch or 0, default=None)
    newest_offset = max(offsets, key=lambda f: f.what.batch or 0, default=None)
    evidence = Evidence(
        last_commit=None if newest_commit is None else newest_commit.what.batch,
        last_commit_at=None if newest_commit is None else newest_commit.info.mtime,
        last_offset=None if newest_offset is None else newest_offset.what.batch,
        last_offset_at=None if newest_offset is None else newest_offset.info.mtime,
        dormant_since=since, dormant_seconds=dormant_seconds,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ckpt-retire-") as tmp:
        # Its rows are written as the listing comes, a page at a time (in order of path, as the
        # apply merges them), and the header, which counts them, is put before them after.
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "wb") as out:
            listed = _listed_into(storage, out)
        refuse_nested(storage, listed.holders)
        plan = RetirementPlan(
            plan_id=new_plan_id(now),
            checkpoint=storage.url, planned_at=now, evidence=evidence, files=listed.files,
            total_bytes=listed.bytes, newest_file_at=listed.newest,
            archive=None if archive is None else archive.url,
        )  # fmt: skip
        rel = manifest_rel(plan.checkpoint, plan.plan_id)
        local = os.path.join(tmp, "manifest.jsonl")
        with open(local, "wb") as out, open(rows, "rb") as body:
            out.write(plan.header().encode() + b"\n")
            shutil.copyfileobj(body, out)
        os.remove(rows)
        digest, size = sha256_of(local), os.path.getsize(local)
        trail.storage.put_file(local, rel, move=True)
    # Last: a manifest without its record (a plan killed between the two) is refused at apply.
    write_record(storage, plan, digest, size)
    try:  # the listing paid for the plan tells the fleet view what the dormant checkpoint holds
        trail.keep_held(storage, since, listed.files, listed.bytes)
    except CheckpointError as exc:  # the plan stands; the fleet view lists it when asked
        log.warning("%s: what it holds was not kept in the audit trail: %s", storage.url, exc)
    log.info("%s: retirement planned: %d files (%s)", storage.url, plan.files, rel)
    return dataclasses.replace(plan, manifest=manifest_url(trail, plan.checkpoint, plan.plan_id))


@dataclasses.dataclass
class _Listed:
    files: int = 0
    bytes: int = 0
    newest: float | None = None
    holders: set[str] = dataclasses.field(default_factory=set)  # see `nested_holders`


def _listed_into(storage: Storage, out: BinaryIO) -> _Listed:
    """Every file of the checkpoint written to `out` as the manifest's rows, a page at a time;
    refused at the first file Spark never writes (a link out, a FIFO)."""
    listed = _Listed()
    for page in storage.pages():
        for rel, why in sorted(untrusted_files(storage, page).items()):
            raise RetirementRefused(f"{why}: a file Spark never writes; look at it, then plan again", rel)
        out.writelines(file_line(f) for f in page)
        listed.files += len(page)
        listed.bytes += sum(f.size for f in page)
        newest = max((f.mtime for f in page if f.mtime is not None), default=None)
        if newest is not None and (listed.newest is None or newest > listed.newest):
            listed.newest = newest
        listed.holders |= nested_holders(page)
    return listed


def nested_holders(files: Iterable[FileInfo]) -> set[str]:
    """The folders below the checkpoint that may be a checkpoint of their own (`refuse_nested`):
    each that holds a `metadata` (an operator's `state/<op>/_metadata` too: Spark's holds no log
    folders, but a checkpoint put there would pass for operator metadata; one listing an
    operator), and each that holds an `offsets/` or `commits/` folder with a file in it, since
    Spark restarts a checkpoint whose `metadata` is gone from its logs, under a new id."""
    holders = set()
    for f in files:
        parts = f.rel.split("/")
        if parts[-1] == "metadata" and len(parts) > 1:
            holders.add("/".join(parts[:-1]))
        for i, part in enumerate(parts[1:-1], start=1):
            if part in ("offsets", "commits"):
                holders.add("/".join(parts[:i]))
    return holders


def refuse_nested(storage: Storage, holders: Iterable[str]) -> None:
    """A folder below the checkpoint that is a checkpoint itself (`offsets/` or `commits/` in it,
    beside its own `metadata`, even empty ones: a query that has not written a batch yet; or
    without one) is not this one's to delete. `holders`: `nested_holders` of its files."""
    for folder in sorted(holders):
        logs = {sub.rsplit("/", 1)[1] for sub in storage.list_dir(folder).folders}
        if logs & {"offsets", "commits"}:
            raise RetirementRefused(f"holds another checkpoint ({folder}): retire that one on its own, first",
                                    storage.url)  # fmt: skip
