"""Fork: a new checkpoint at DEST holding exactly what Spark's recovery at a committed batch reads.

One operation serves three uses: relocate a query (another bucket, local to S3) without replaying
it, roll it back to an earlier committed batch, and audit a production checkpoint on a copy. DEST
receives, as of batch N:
- the query `metadata` (a new id when asked), `offsets/` and `commits/` up to N, and every source
  log file (`sources/<i>/<b>` or a named source's `sources/<name>/<b>`, `.compact` included) up to N;
- the operator metadata up to N, v2 files with each absolute path rewritten to DEST (Spark reads the
  schema through them: a plain copy would keep reading SRC's), the schema files they name, and the
  per-store schema files of partition 0;
- per store, what loading version N+1 reads (docs/format.md §7): the committed zip, or the
  committed changelog with its replay chain, the base zip, and the SSTs (and archived logs) it
  lists; with their Spark `.crc` sidecars. In format V1 the same from the store's folder: the
  newest zip (the HDFS-backed store: snapshot) at or below N+1 and the changelogs (deltas) after it.
Nothing else: no later batch, no lost attempt, no history, no Hadoop `.crc` (Hadoop reads a file
without one unchecked).

Reading SRC costs what recovery at N costs (checkpoint.model.head) plus one shallow listing per source log.
Writing is ordered so that an interrupted fork can never pass for a checkpoint: `_ckpt_fork.json`
first, then the state and schema files, whose bytes are all checked (CRC32C against Spark's
sidecars, read back from DEST where they were copied server-side; format V1, which has no
sidecars, read back from DEST and decoded as Spark's load decodes them) before the offsets, the commits
and the query `metadata` are written, and `_ckpt_fork.complete.json` last, after DEST was checked
against the plan (every file with its size, nothing else). Validation reports a DEST without the
second marker as an INCOMPLETE_FORK, and running the same fork again finishes it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from checkpoint.crash import crash_point
from checkpoint.errors import (
    CheckpointError,
    CorruptFileError,
    ForkIncomplete,
    ForkRefused,
    NotACheckpointError,
)
from checkpoint.fork.markers import ForkResult, ForkStarted
from checkpoint.fork.plan import (
    STEP_OFFSETS,
    STEP_STATE,
    ForkItem,
    ForkPlan,
    ForkPlanOptions,
    plan_fork,
    read_source,
)
from checkpoint.format import (
    FORK_COMPLETE,
    FORK_STARTED,
    MAINT_TEMP_PREFIX,
    RECORD_BYTES,
    FileKind,
    check_whole,
    crc32c_signed,
    signed,
)
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report
from checkpoint.safety import TwoSided, refuse_overlap
from checkpoint.storage import FileInfo, Storage, normalize_url

log = logging.getLogger(__name__)
_PROGRESS_EVERY = 500  # files between progress lines

_STEP_NAMES = ("state, schema and source logs", "offsets", "commits", "query metadata")


@dataclass(frozen=True)
class DestState:
    """What DEST holds before the fork writes: nothing, an interrupted fork, or a complete one."""

    files: dict[str, FileInfo]
    started: ForkStarted | None
    complete: ForkResult | None


# ------------------------------------------------------------------------------------------------
# Reading SRC


def inspect_dest(dest: Storage) -> DestState:
    """DEST's files (one listing: DEST is the fork's own size) and its fork markers, if any. A
    file (an object) at DEST's own name is refused: a listing shows it as nothing, and the fork
    would write its checkpoint beside it."""
    try:
        files = {f.rel: f for f in dest.list_files()}
    except NotACheckpointError:  # nothing there yet
        files = {}
    if not files and dest.stat("") is not None:
        raise ForkRefused("the destination is a file, not a folder", dest.url)
    started = complete = None
    if FORK_STARTED in files:
        started = ForkStarted.parse(
            dest.read_bytes(FORK_STARTED, limit=RECORD_BYTES), dest.full(FORK_STARTED)
        )
    if FORK_COMPLETE in files:
        complete = ForkResult.parse(dest.read_bytes(FORK_COMPLETE, limit=RECORD_BYTES),
                                    dest.full(FORK_COMPLETE))  # fmt: skip
    return DestState(files, started, complete)


def check_dest(
    state: DestState, source: str, batch: int | None, *, new_query_id: bool, dest: Storage
) -> None:
    """Refuses a DEST that is neither empty nor an interrupted (or complete) run of this same fork."""
    if state.started is None:
        if state.files:
            first = sorted(state.files)[0]
            raise ForkRefused(
                f"the destination is not empty ({len(state.files)} files, e.g. {first})", dest.url
            )
        return
    # Markers of earlier releases may hold the source as it was spelled: compare one spelling.
    started = state.started
    same = normalize_url(started.source) == source and started.new_query_id == new_query_id
    if not same or (batch is not None and started.batch != batch):
        raise ForkRefused(
            f"the destination holds {'a' if state.complete else 'an interrupted'} fork of "
            f"{started.source} at batch {started.batch} "
            f"(new query id: {started.new_query_id}): run that fork, or empty it",
            dest.url,
        )


# ------------------------------------------------------------------------------------------------
# Applying


class _Copier:
    """Writes a fork's items to DEST, from several threads: the bytes a plan carries, a hard link
    where asked and possible, else a copy (server-side on S3) whose CRC32C is checked against the
    source's sidecar. Keeps what was written, how, and the CRCs the final check compares."""

    def __init__(self, src: Storage, dest: Storage, todo: int, *, link: bool) -> None:
        self.src, self.dest, self.todo, self.link = src, dest, todo, link
        self.copied: list[ForkItem] = []
        self.server_side: list[str] = []
        self.linked: list[str] = []
        self.crcs: dict[str, int] = {}
        self._lock = threading.Lock()

    def write(self, item: ForkItem) -> None:
        src, dest = self.src, self.dest
        crc: int | None
        linked_here = False
        if item.data is not None:
            dest.write_if_absent(item.rel, item.data, MAINT_TEMP_PREFIX)
            crc = crc32c_signed(item.data)
        elif self.link and src.link_to(item.rel, dest, item.rel):
            # The source's own bytes under a second name: there is no copy to check against the
            # sidecar (a damaged source fails the caller's own read of it, as Spark's would).
            crc, linked_here = item.crc, True
        else:
            got = src.copy_to(item.rel, dest, item.rel, item.size, MAINT_TEMP_PREFIX)
            crc = None if got is None else signed(got)
            if crc is not None and item.crc is not None and crc != item.crc:
                _corrupt(dest, item)  # stops the fork in its first step, before any log is written
        with self._lock:
            self.copied.append(item)
            if linked_here:
                self.linked.append(item.rel)
            elif crc is None:
                self.server_side.append(item.rel)
            if crc is not None:
                self.crcs[item.rel] = crc
            done = len(self.copied)
        if done % _PROGRESS_EVERY == 0:
            report(log, Progress("files written", done, self.todo), "%s: %d of %d files written",
                   dest.url, done, self.todo)  # fmt: skip


def apply_fork(
    plan: ForkPlan,
    src: Storage,
    dest: Storage,
    state: DestState,
    *,
    check: Callable[[], None],
    workers: int = POLICY.fork_workers,
    since: tuple[float, int] | None = None,
    link: bool = False,
    before_complete: Callable[[], None] = lambda: None,
) -> ForkResult:
    """Writes the plan to DEST in its steps, resuming an interrupted run, then checks every file,
    runs `before_complete` (a migration's proof by Spark's reader) and writes the completion
    marker. `check` runs before each step (the leases' `check`); `since` is (monotonic time,
    requests so far) where the fork began, for its figures. Any failure raises ForkIncomplete:
    DEST stays marked incomplete and the same fork run again finishes it."""
    started, before = since or (time.monotonic(), src.calls.total() + dest.calls.total())
    present = {rel: f for rel, f in state.files.items() if not _temp(rel)}
    todo = [i for i in plan.items if i.rel not in present]
    copier = _Copier(src, dest, len(todo), link=link)
    copied = copier.copied
    try:
        if state.started is None:
            dest.write_if_absent(FORK_STARTED, plan.started().to_json(), MAINT_TEMP_PREFIX)
        else:
            _clear_temps(dest, state)
        for item in plan.items:
            have = present.get(item.rel)
            if have is not None and have.size != item.size:
                raise ForkIncomplete(
                    f"{item.rel} holds {have.size} bytes where the fork writes {item.size}: not written by "
                    "this fork; empty the destination and fork again",
                    dest.url,
                )
        crcs, decoded = copier.crcs, set[str]()

        for step, name in enumerate(_STEP_NAMES):
            check()
            if step == STEP_OFFSETS:
                # Every byte of the state, schema and source logs is checked (read back where it
                # was copied server-side or kept from a killed run) before the first log file that
                # makes DEST look like a checkpoint to Spark.
                _verify_bytes(
                    [i for i in plan.items if i.step == STEP_STATE], dest, crcs, plan.codec, decoded
                )
            batch = [i for i in todo if i.step == step]
            if batch:
                log.info("%s: writing %s (%d files)", dest.url, name, len(batch))
                with ThreadPoolExecutor(max(1, min(workers, len(batch)))) as pool:
                    list(pool.map(copier.write, batch))
            crash_point("fork.after_step", step)
        check()
        _verify(plan, dest, crcs, decoded)
        before_complete()
        result = ForkResult(
            source=plan.source, dest=plan.dest, batch=plan.batch, query_id=plan.query_id,
            files=plan.files, total_bytes=plan.total_bytes, copied_files=len(copied),
            copied_bytes=sum(i.size for i in copied), resumed_files=plan.files - len(todo),
            server_side_files=len(copier.server_side), seconds=round(time.monotonic() - started, 3),
            requests=src.calls.total() + dest.calls.total() - before, linked_files=len(copier.linked),
        )  # fmt: skip
        dest.write_if_absent(FORK_COMPLETE, result.to_json(), MAINT_TEMP_PREFIX)
        result = dataclasses.replace(result, requests=src.calls.total() + dest.calls.total() - before)
    except ForkIncomplete:
        raise
    except (CheckpointError, OSError) as exc:
        raise ForkIncomplete(
            f"the fork stopped after {len(copied)} of {plan.files} files ({exc}); the destination is marked "
            "incomplete: run the same fork again to finish it",
            dest.url,
        ) from exc
    log.info("%s: fork complete: %d files, %d bytes", dest.url, result.files, result.total_bytes)
    return result


def _temp(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.startswith(MAINT_TEMP_PREFIX) and name.endswith(".tmp")


def _clear_temps(dest: Storage, state: DestState) -> None:
    """Removes the temp files a killed run left in DEST (only this tool names files so)."""
    temps = [rel for rel in state.files if _temp(rel)]
    for i in range(0, len(temps), POLICY.delete_batch_size):
        failed = dest.delete_batch(temps[i : i + POLICY.delete_batch_size])
        if failed:
            rel, why = next(iter(failed.items()))
            raise ForkIncomplete(f"cannot remove a leftover temp file {rel}: {why}", dest.url)


def _verify(plan: ForkPlan, dest: Storage, crcs: dict[str, int], decoded: set[str]) -> None:
    """DEST holds exactly the plan's files with the plan's sizes, and every file with a Spark
    sidecar matches it (see _verify_bytes)."""
    found = {f.rel: f for f in dest.list_files()}
    for item in plan.items:
        have = found.get(item.rel)
        if have is None:
            raise ForkIncomplete(f"{item.rel} is missing after it was written", dest.url)
        if have.size != item.size:
            raise ForkIncomplete(f"{item.rel} holds {have.size} bytes, {item.size} expected", dest.url)
    extra = sorted(set(found) - {i.rel for i in plan.items} - {FORK_STARTED})
    if extra:
        raise ForkIncomplete(
            f"the destination holds {len(extra)} files the fork did not write, e.g. {extra[0]}", dest.url
        )
    _verify_bytes(plan.items, dest, crcs, plan.codec, decoded)


def _verify_bytes(
    items: Iterable[ForkItem], dest: Storage, crcs: dict[str, int], codec: str, decoded: set[str]
) -> None:
    """Every item with a Spark sidecar matches it. Bytes that never passed through this process
    (server-side copies, files of an interrupted run) are read back from DEST once; what was
    checked is remembered in `crcs`. A format V1 state file, which has no sidecar, is read back
    from DEST once and decoded as Spark reads it (`_decode`); `decoded` remembers it."""
    for item in items:
        if item.decode is not None and item.rel not in decoded:
            _decode(dest, item, item.decode, codec)
            decoded.add(item.rel)
        if item.crc is None:
            continue
        crc = crcs.get(item.rel)
        if crc is None:
            _, raw = dest.download(item.rel, os.devnull, item.size)
            crc = crcs[item.rel] = signed(raw)
        if crc != item.crc:
            _corrupt(dest, item)


def _decode(dest: Storage, item: ForkItem, kind: FileKind, codec: str) -> None:
    """Reads a copied V1 state file from DEST as Spark's load reads its `kind` (`check_whole`).
    Raises CorruptFileError."""
    path = dest.full(item.rel)
    with dest.open(item.rel, block_size=POLICY.copy_chunk_bytes, size=item.size) as fh:
        check_whole(kind, fh, codec, path)


def _corrupt(dest: Storage, item: ForkItem) -> None:
    raise CorruptFileError(
        "the bytes do not match the source's .crc sidecar (CRC32C and size): Spark would refuse this file",
        dest.full(item.rel),
    )


# ------------------------------------------------------------------------------------------------
# The whole operation, for the CLI and Dagster


@dataclass(frozen=True)
class ForkOptions:
    batch: int | None = None  # the batch forked at; default: the latest committed
    new_query_id: bool = False  # DEST gets a query id of its own (sinks that remember batches)
    workers: int = POLICY.fork_workers
    # Files both sides hold on one local file system are hard-linked, not copied (a backup beside
    # the checkpoint: Spark never rewrites a state or log file in place); the rest is copied.
    link: bool = False
    what: str = "fork"  # what the leases say they are held for


def fork_checkpoint(request: TwoSided, options: ForkOptions = ForkOptions()) -> ForkResult:
    """The fork's door: `request`'s overlap refused and both leases taken (`safety.door`), then the
    fork under them. A DEST that is not this fork's is refused first as well, and again under the
    leases: a fork aimed at somebody's folder leaves no lease record beside it."""
    refuse_overlap(request.src, request.dest, request.dest_is)
    check_dest(inspect_dest(request.dest), request.src.url, options.batch,
               new_query_id=options.new_query_id, dest=request.dest)  # fmt: skip
    with request.held(options.what) as check:
        return _fork_held(request.src, request.dest, options, check)


@dataclass(frozen=True)
class WritePlanOptions:
    plan: ForkPlan  # another action's plan (a migration's: its logs rewritten, its state written)
    before_complete: Callable[[], None] = lambda: None  # its proof, before the completion marker


def write_fork_plan(request: TwoSided, options: WritePlanOptions) -> ForkResult:
    """Another action's fork plan written to `request.dest` through the fork's door."""
    with request.held("fork plan") as check:
        dest = request.dest
        return apply_fork(options.plan, request.src, dest, inspect_dest(dest), check=check,
                          before_complete=options.before_complete)  # fmt: skip


def _fork_held(src: Storage, dest: Storage, options: ForkOptions, check: Callable[[], None]) -> ForkResult:
    """Forks SRC into DEST as `options` say, under the leases the door holds (their `check`); see
    the module docstring."""
    batch, new_query_id = options.batch, options.new_query_id
    since = (time.monotonic(), src.calls.total() + dest.calls.total())
    refuse_overlap(src, dest)
    state = inspect_dest(dest)
    check_dest(state, src.url, batch, new_query_id=new_query_id, dest=dest)
    if state.complete is not None:
        log.info("%s: already a complete fork of %s at batch %s", dest.url, src.url, state.complete.batch)
        return dataclasses.replace(state.complete, copied_files=0, copied_bytes=0, seconds=0.0, requests=0)
    if state.started is not None:
        batch = state.started.batch
        log.info("%s: resuming an interrupted fork of %s at batch %d", dest.url, src.url, batch)
    source = read_source(src, batch)
    query_id = None
    if new_query_id:
        query_id = state.started.query_id if state.started is not None else str(uuid.uuid4())
    plan = plan_fork(source, ForkPlanOptions(dest, query_id))
    return apply_fork(plan, src, dest, state, check=check, workers=options.workers, since=since,
                      link=options.link)  # fmt: skip
