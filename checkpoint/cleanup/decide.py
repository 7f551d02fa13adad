"""One state partition decided: its files listed and classified by the rules, candidates written
as they are found, the SSTs a live query may reuse held back for the floor. What a planning worker
runs, in this process or another."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TextIO

from checkpoint.cleanup.held import HeldFiles
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
from checkpoint.cleanup.totals import Totals
from checkpoint.errors import CheckpointError, GcError
from checkpoint.format import ByRecovery, FileKind
from checkpoint.model import (
    Checkpoint,
    CheckpointFile,
    StoreId,
    partitions_named,
)
from checkpoint.policy import POLICY
from checkpoint.safety import PlannedFile, candidate_line, candidate_tail
from checkpoint.storage import FileInfo, Storage

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)
LINES_PER_WRITE = 8192  # a partition's lines are written in chunks, never held whole


Lister = Callable[[Storage, str], list[FileInfo]]


# The partitions a plan decides at once in this process (in threads, on object stores) hold about
# so many listed files in all, and one partition more (`held`).
HELD = HeldFiles(POLICY.plan_files_at_once)


def list_folder(storage: Storage, folder: str) -> list[FileInfo]:
    """A partition's files in path order, listed a page at a time: each page waits for room."""
    files: list[FileInfo] = []
    for page in storage.pages(folder):
        HELD.take(len(page))
        files += page
    return files


@dataclass(frozen=True)
class Context:
    """What deciding any one partition needs: the same for all of them, sent once to each worker
    process."""

    base: Checkpoint
    window: list[int]
    # partition folder -> batch -> store -> id (None in format V1)
    committed: dict[str, dict[int, dict[StoreId, str | None]]]
    options: GcOptions
    now: float
    lister: Lister
    spill_dir: str  # the plan's local temp folder


@dataclass(frozen=True)
class Decided:
    """One partition decided, as the spill takes it: a few figures, its candidates already written
    as manifest lines (held ones apart), so a worker sends back neither the partition nor its lines."""

    listed: int
    retained: int
    by_reason: Totals
    by_store: Totals
    kept: Counter[str]
    oldest_retained_sst: float | None
    # Decided apart (in a pool, or before a plan knows whether it starts one): its lines and held
    # lines, in files of its own for the spill to append in folder order; else they went straight
    # to the spill.
    apart: tuple[str, str] | None = None


def decide_into(context: Context, folder: str, lines: TextIO, held: TextIO) -> Decided:
    with HELD.deciding(context.spill_dir, folder):  # a plan's own temporary folder names it
        return _decide(context, folder, lines, held)


def _decide(context: Context, folder: str, lines: TextIO, held: TextIO) -> Decided:
    infos = context.lister(context.base.storage, folder)
    listing = CheckpointFile.of_listing(infos)
    committed = context.committed.get(folder, {})
    scan = scan_partition(context.base, context.window, committed, listing, context.options, context.now)
    # A partition's candidates fall into a few groups of one reason and one store: each group's
    # texts are made and quoted once, and its totals summed once, not per line or per file. In one
    # partition folder a store's name tells its operator and partition, and a file in no store
    # (a Hadoop crc) has none of the three.
    groups: dict[tuple[Reason, str | None], _Group] = {}
    held_for_floor = scan.held_for_floor
    ordered = scan.candidates  # zips before the SSTs they list, sidecars after their main file
    for start in range(0, len(ordered), LINES_PER_WRITE):
        out = []
        for f, reason in ordered[start : start + LINES_PER_WRITE]:
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
                held.write(json.dumps({"sst_mtime": held_for_floor[rel], **planned.as_dict()}) + "\n")
                continue
            out.append(candidate_line(size, info.mtime or 0.0, rel, group.tail))
            group.sizes.append(size)
        lines.write("".join(out))
    by_reason, by_store = Totals(), Totals()
    for group in groups.values():
        if not group.sizes:  # only held back, for now
            continue
        by_reason.add(group.reason, sum(group.sizes), len(group.sizes))
        by_store.add(group.store, sum(group.sizes), len(group.sizes))
    return Decided(
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
        self.tail = candidate_tail(reason, store)
        self.sizes: list[int] = []


_REASON_TEXT = {reason: reason.value for reason in Reason}  # Enum's .value is a slow property


def decide_apart(context: Context, folder: str) -> Decided:
    """In a pool, or before a plan knows whether it starts one: the lines into files of the
    partition's own, so a partition's lines are on disk, never held whole in a worker or passed
    back to the plan, and come before those the spill writes itself."""
    stem = os.path.join(context.spill_dir, folder.replace("/", "_"))
    apart = (f"{stem}.jsonl", f"{stem}.held.jsonl")
    with open(apart[0], "w") as lines, open(apart[1], "w") as held:
        decided = decide_into(context, folder, lines, held)
    return replace(decided, apart=apart)


def _headers_to_read(
    index: FileIndex, committed: dict[int, dict[StoreId, str | None]]
) -> dict[str, CheckpointFile]:
    """The committed changelogs without a zip of their version: their headers name the lineage."""
    to_read: dict[str, CheckpointFile] = {}
    for batch, stores in committed.items():
        for sid, uid in stores.items():
            if index.get(sid, FileKind.ZIP, batch + 1, uid) is not None:
                continue
            changelog = index.get(sid, FileKind.CHANGELOG, batch + 1, uid)
            if changelog is not None:
                to_read[changelog.rel] = changelog
    return to_read


def _no_headers(
    index: FileIndex, committed: dict[int, dict[StoreId, str | None]]
) -> dict[str, CheckpointFile]:
    return {}


# The changelog headers a partition's decision reads: none in a listed format, whose store folder
# tells its chain.
_HEADERS = ByRecovery(listed=_no_headers, named=_headers_to_read)


def scan_partition(
    base: Checkpoint,
    window: list[int],
    committed: dict[int, dict[StoreId, str | None]],
    files: tuple[CheckpointFile, ...],
    options: GcOptions,
    now: float,
) -> OrphanScan:
    """One partition decided alone: its stores' committed ids, lineages and zip listings.

    Only the stores the logs and the operator metadata name are decided: a partition folder that
    no batch names keeps every file (fail closed), and a store folder beside named ones that the
    metadata leaves out refuses the plan, as validation does."""
    files, unnamed = _named_only(base, files)
    index = FileIndex(files)  # built once: for the lineage reads here, then for the rules
    to_read = base.states.recovery.of(_HEADERS)(index, committed)
    lineages = {}
    for changelog, header in base.read_changelog_headers(list(to_read.values())):  # raises: fail closed
        if header.lineage is None:
            raise GcError("a V2 changelog without lineage", base.storage.full(changelog.rel))
        lineages[changelog.rel] = header.lineage
    zip_ssts = _ZipListings(base, {f.rel: f for f in index.of_kind[FileKind.ZIP]})
    try:
        scan = find_orphans(
            RetentionInputs(
                files,
                window[-1],
                dict(committed),
                lineages,
                zip_ssts,
                base.states,
            ),
            options,
            now,
            index,
        )
    except UnsafeToPlan as exc:
        raise GcError(f"unsafe to plan: {exc}", base.url) from exc
    _guard_paths(base, [c.file for c in scan.candidates])
    scan.kept.update(dict.fromkeys(unnamed, Kept.UNNAMED))
    return scan


def _named_only(
    base: Checkpoint, files: tuple[CheckpointFile, ...]
) -> tuple[tuple[CheckpointFile, ...], list[str]]:
    """(the files of stores the logs and metadata name, the rels of the others, kept)."""
    counts = partitions_named(base)
    stores: set[tuple[int, int, str]] = set()
    for f in files:
        w = f.what
        if w.operator is not None and w.partition is not None and w.store is not None:
            stores.add((w.operator, w.partition, w.store))
    unnamed = [
        (op, part, store)
        for op, part, store in stores
        if op not in base.operators or part >= counts[op] or store not in base.operators[op].store_names
    ]
    if not unnamed:
        return files, []
    for op_id, partition, store in sorted(unnamed):
        op = base.operators.get(op_id)
        if op is not None and partition < counts[op_id]:
            names = ", ".join(op.store_names)
            raise GcError(
                f"unsafe to plan: state/{op_id}/{partition} holds store {store!r}, which operator {op_id}'s "
                f"metadata does not name ({names})",
                base.url,
            )
    gone = set(unnamed)
    out = tuple(f for f in files if (f.what.operator, f.what.partition, f.what.store) not in gone)
    # A Hadoop crc names no store: it stays with its main file, or would read as a stale sidecar.
    kept = {f.rel for f in out}
    named = tuple(f for f in out if f.what.main is None or f.what.main in kept or f.what.operator is not None)
    decided = {f.rel for f in named}
    return named, [f.rel for f in files if f.rel not in decided]


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
