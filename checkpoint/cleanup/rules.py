"""Which files of a checkpoint can never be read again: the retained set and the orphans.

Pure: the inputs are plain data (the classified listing, the committed ids of the retained batches,
the lineage headers and the SSTs each zip lists), so property tests can drive it without storage.
The rules are `docs/safety.md`'s; reading the inputs, and failing closed when one cannot be
read, is `plan.plan_gc`'s job.
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from checkpoint.format import (
    ROCKSDB_V2,
    SIDECAR_MAIN,
    ByRecovery,
    FileKind,
    LineageEntry,
    StateFormat,
    classify,
)
from checkpoint.model import CheckpointFile, StoreId
from checkpoint.policy import POLICY


class Reason(str, Enum):
    UNCOMMITTED_ATTEMPT = (
        "uncommitted_attempt"  # another attempt of a committed version, written before the winner
    )
    SUPERSEDED = "superseded"  # re-executed after the committed attempt (e.g. a second foreachBatch action)
    BELOW_RETENTION = "below_retention_window"  # a version older than every retained batch needs
    UNREFERENCED_SST = "unreferenced_sst"  # no zip that stays lists it
    STALE_SIDECAR = "stale_sidecar"  # a .crc whose main file is gone or goes
    ABANDONED_TEMP = "abandoned_temp"  # this tool's temp file left by a crash while publishing
    KILLED_WRITE = "killed_write"  # Spark's temp file of a write never renamed into place (format V1)


class Kept(str, Enum):
    """Why an orphan is not a candidate (yet)."""

    YOUNG = "younger_than_grace"
    NO_MTIME = "no_mtime"
    LIVE_RECENT_VERSION = "live_query_recent_version"
    LIVE_RECENT_SST = "live_query_sst_newer_than_retained"
    LIVE_TEMP = "live_query_temp_file"  # Spark's temp file on a query that may be writing it
    MAIN_KEPT = "main_file_kept"
    NOT_OURS = "sidecar_of_a_file_not_ours"
    LISTED_BY_KEPT_ZIP = "listed_by_a_kept_zip"
    UNNAMED = "in_a_folder_no_batch_names"  # a partition beyond every count the logs pin: fail closed


class UnsafeToPlan(Exception):
    """A retained lineage cannot be established: planning must stop, nothing may be deleted."""


class Candidate(NamedTuple):
    # A named tuple: a plan makes one per candidate, most of a partition's files, by `_new`.
    file: CheckpointFile
    reason: Reason

    @property
    def rel(self) -> str:
        return self.file.info.rel


# A named tuple's own constructor is a Python function, a frame per call: candidates are made by
# `tuple.__new__` with both fields given.
_new = tuple.__new__


@dataclass(frozen=True)
class RetentionInputs:
    files: tuple[CheckpointFile, ...]
    latest_committed: int
    # batch -> store -> committed id, for every batch in the retention window; None in format V1,
    # whose names carry no id: every store then loads from what its folder holds
    committed: dict[int, dict[StoreId, str | None]]
    # rel of a committed changelog -> its lineage (the header), for the changelogs the window needs
    lineages: dict[str, tuple[LineageEntry, ...]]
    # rel of a zip -> the DFS names of the SSTs it lists; None for a zip that could not be read, which
    # then protects every SST of its store if it stays. Only zips that stay (retained, or orphans kept)
    # are looked up: a planner may read each on demand, and spare the reads of the zips that go.
    zip_ssts: Mapping[str, tuple[str, ...] | None]
    # The checkpoint's state format: the files its recovery reads, and whether the commit log names
    # them (V2) or they are the ones without ids (V1), where a folder no retained batch names (a
    # partition count since lowered) holds history only
    states: StateFormat = ROCKSDB_V2


@dataclass(frozen=True)
class GcOptions:
    grace_seconds: float = POLICY.grace_seconds
    live: bool = False
    # A live query's unreferenced SSTs go only when older than the oldest SST a retained zip lists,
    # over the whole checkpoint. A planner that sees one partition at a time holds them back
    # (`OrphanScan.held_for_floor`) and decides them once every partition has been seen.
    defer_live_ssts: bool = False


@dataclass(frozen=True)
class OrphanScan:
    retained: frozenset[str]
    # Zips, changelogs (deltas, snapshots), SSTs, Spark's temp files (V1), Spark's sidecars,
    # Hadoop's, then this tool's temp files: each kind in the order
    # of `files` (a sorted listing gives each kind by path). A zip comes before the SSTs it lists
    # and a sidecar after its main file, the order a plan deletes them in.
    candidates: tuple[Candidate, ...]
    kept: dict[str, Kept] = field(default_factory=dict)
    oldest_retained_sst: float | None = None
    # With `defer_live_ssts`: candidate rel -> the mtime of the SST whose fate it shares (the SST
    # itself, or the SST a sidecar belongs to); a candidate only if older than the oldest retained
    # SST of the whole checkpoint.
    held_for_floor: dict[str, float] = field(default_factory=dict)


def _store_of(f: CheckpointFile) -> StoreId | None:
    w = f.what
    if w.operator is None or w.partition is None or w.store is None:
        return None
    return _store_id(w.operator, w.partition, w.store)


_file_rel = operator.attrgetter("info.rel")


@functools.lru_cache(maxsize=4096)
def _store_id(operator: int, partition: int, store: str) -> StoreId:
    # One object per store, not per file: a partition's index keys every file by its store.
    return StoreId(operator, partition, store)


class FileIndex:
    """A partition's (or any) classified listing, indexed once for the rules: by (store, kind,
    version, id), SSTs by store and name, files by path and by kind. A planner that must look up
    committed files before the rules run (to read their lineage) builds it and passes it on."""

    def __init__(self, files: tuple[CheckpointFile, ...]):
        # Keyed by a store's fields, not its StoreId, while files are walked: a dataclass hashes
        # through a Python call, a tuple of ints and strings in C (a partition has 10^4 changelogs).
        self.by_key: dict[tuple[int, int, str, FileKind, int, str | None], CheckpointFile] = {}
        self.ssts: dict[StoreId, dict[str, CheckpointFile]] = defaultdict(dict)
        # Each rule walks the files of its kinds only, in listing order.
        self.of_kind: dict[FileKind, list[CheckpointFile]] = defaultdict(list)
        # Built in C where it can be, then one pass: a partition holds 10^4-10^5 files.
        self.by_rel: dict[str, CheckpointFile] = dict(zip(map(_file_rel, files), files, strict=True))
        by_key, of_kind = self.by_key, self.of_kind
        oldest: dict[tuple[int, int, str], int] = {}
        # Locals: on Python 3.11 `FileKind.ZIP` is a Python-level lookup, here three per file.
        changelog, zip_, sst = FileKind.CHANGELOG, FileKind.ZIP, FileKind.SST
        delta, snapshot = FileKind.DELTA, FileKind.SNAPSHOT
        for f in files:
            what = f.what
            kind = what.kind
            of_kind[kind].append(f)
            if kind is not changelog and kind is not zip_ and kind is not sst:
                if kind is not delta and kind is not snapshot:
                    continue
            op, part, store = what.operator, what.partition, what.store
            if op is None or part is None or store is None:
                continue
            if kind is sst:
                self.ssts[_store_id(op, part, store)][f.info.rel.rsplit("/", 1)[1]] = f
                continue
            version = what.version_id
            by_key[(op, part, store, kind, version, what.unique_id)] = f
            old = oldest.get((op, part, store))
            if old is None or version < old:
                oldest[(op, part, store)] = version
        self.oldest_version: dict[StoreId, int] = {_store_id(*k): v for k, v in oldest.items()}
        self._versions_of: dict[tuple[StoreId, FileKind], list[int]] = {}  # `newest`'s, built on demand

    def get(self, sid: StoreId, kind: FileKind, version: int, uid: str | None) -> CheckpointFile | None:
        return self.by_key.get((sid.operator, sid.partition, sid.store, kind, version, uid))

    def newest(
        self, sid: StoreId, kind: FileKind, version: int, states: StateFormat
    ) -> CheckpointFile | None:
        """A listed format's (V1's): the file of `kind` with the highest version at or below
        `version`, among those named as `states` names them."""
        found = self._versions_of.get((sid, kind))
        if found is None:
            found = self._versions_of[(sid, kind)] = sorted(v for v, _ in states.named(
                (v, uid) for (op, part, store, k, v, uid) in self.by_key
                if k is kind and (op, part, store) == (sid.operator, sid.partition, sid.store)
            ))  # fmt: skip
        at = bisect.bisect_right(found, version)
        return self.get(sid, kind, found[at - 1], None) if at else None


def _gap(sid: StoreId, batch: int, what: str, version: int, *, latest: bool, pruned_below: int) -> None:
    if latest or version >= pruned_below:
        raise UnsafeToPlan(f"{sid}: {what} (batch {batch}) is missing")


def retained_set(inputs: RetentionInputs, index: FileIndex | None = None) -> tuple[set[str], set[str]]:
    """(every retained rel, the rels of the retained zips).

    For each batch of the window and each store: the committed files of version batch+1, and the
    replay chain Spark would load them from (changelogs back to the newest zip in the lineage, that
    zip, and every SST it lists). A gap that Spark's own per-partition pruning explains (a version
    below the store's oldest surviving file, never the latest batch) makes that batch unloadable,
    not the plan unsafe; any other gap stops the plan.
    """
    index = index or FileIndex(inputs.files)
    retained: set[str] = set()
    zips: set[str] = set()
    for batch, stores in sorted(inputs.committed.items()):
        latest = batch == inputs.latest_committed
        version = batch + 1
        for sid, uid in stores.items():
            pruned_below = index.oldest_version.get(sid, version + 1)

            def gap(what: str, v: int) -> None:
                _gap(sid, batch, what, v, latest=latest, pruned_below=pruned_below)  # noqa: B023 - called inside this iteration

            retain = inputs.states.recovery.of(_RETAIN)
            retain(index, inputs, _Store(sid, version, uid), retained, zips, gap)
    for z in sorted(zips):  # sorted: the same zip is named first in every process (string hashes differ)
        listed = inputs.zip_ssts.get(z)
        if listed is None:
            raise UnsafeToPlan(f"the metadata of retained zip {z} was not read")
        zip_store = _store_of(index.by_rel[z])
        if zip_store is None:
            raise UnsafeToPlan(f"retained zip {z} lies in no store folder")
        for name in listed:
            sst = index.ssts[zip_store].get(name)
            if sst is None:
                raise UnsafeToPlan(f"SST {name} listed by retained zip {z} is missing")
            retained.add(sst.rel)
    return retained, zips


class _Store(NamedTuple):
    sid: StoreId
    version: int  # the committed version: its batch + 1
    uid: str | None  # its committed id (format V2)


def _retain_named(
    index: FileIndex,
    inputs: RetentionInputs,
    store: _Store,
    retained: set[str],
    zips: set[str],
    gap: Callable[[str, int], None],
) -> None:
    """Format V2: the committed zip, or the committed changelog and its lineage back to the
    newest zip the header names."""
    sid, version, uid = store
    zip_file = index.get(sid, FileKind.ZIP, version, uid)
    changelog = index.get(sid, FileKind.CHANGELOG, version, uid)
    for f in (zip_file, changelog):
        if f is not None:
            retained.add(f.rel)
    if zip_file is not None:
        zips.add(zip_file.rel)
        return
    if changelog is None:
        gap(f"committed version {version} id {uid}", version)
        return
    lineage = inputs.lineages.get(changelog.rel)
    if lineage is None:
        raise UnsafeToPlan(f"{sid}: the lineage of {changelog.rel} was not read")
    for entry in reversed(lineage):
        base = index.get(sid, FileKind.ZIP, entry.version, entry.unique_id)
        if base is not None:
            retained.add(base.rel)
            zips.add(base.rel)
            break
        link = index.get(sid, FileKind.CHANGELOG, entry.version, entry.unique_id)
        if link is None:
            gap(f"changelog {entry.version}_{entry.unique_id} of the replay chain", entry.version)
            break
        retained.add(link.rel)


def _retain_listed(
    index: FileIndex,
    inputs: RetentionInputs,
    store: _Store,
    retained: set[str],
    zips: set[str],
    gap: Callable[[str, int], None],
) -> None:
    """Format V1: the newest base at or below the version, every step after it, and the step of
    the version itself (as V2 keeps a committed changelog beside its zip)."""
    kinds, sid, version = inputs.states.files, store.sid, store.version
    base = index.newest(sid, kinds.base, version, inputs.states)
    start = 0 if base is None else base.what.version_id
    if base is not None:
        retained.add(base.rel)
        if base.kind.lists_files:
            zips.add(base.rel)
    own = index.get(sid, kinds.step, version, None)
    if own is not None:
        retained.add(own.rel)
    for v in range(version, start, -1):  # newest first: what was retained for a later batch stops it
        step = index.get(sid, kinds.step, v, None)
        if step is None:
            gap(f"{kinds.step.value} {v} of the replay chain", v)
            return
        if step.rel in retained and v != version:
            return
        retained.add(step.rel)


# A batch keeps what its recovery would read: in V1 the newest snapshot at or below it and the
# deltas above, found by version; in V2 the files its id and lineage header name.
_RETAIN = ByRecovery(listed=_retain_listed, named=_retain_named)


def find_orphans(
    inputs: RetentionInputs, options: GcOptions, now: float, index: FileIndex | None = None
) -> OrphanScan:
    """The candidates for deletion, each with its reason; everything else stays. `index`, when
    given, is the FileIndex of `inputs.files`.

    Only files under `state/` are ever candidates, and only kinds this release understands:
    changelogs and zips with an id (format V2) or without (format V1, with the HDFS-backed store's
    deltas and snapshots and Spark's temp files), SSTs, and `.crc` files of either kind.
    """
    index = index or FileIndex(inputs.files)
    retained, _ = retained_set(inputs, index)
    decider = _Decider(inputs, options, now, index, retained)
    decider.versions()
    oldest_retained_sst = decider.ssts()
    decider.killed_writes()
    decider.sidecars()
    decider.temps()
    chosen = decider.chosen
    return OrphanScan(
        frozenset(retained), tuple(chosen.values()), decider.kept, oldest_retained_sst, decider.held
    )


class _Decider:
    """find_orphans' five phases over one partition's files, in order, each deciding what the
    earlier ones left: what goes (`chosen`), what stays and why (`kept`), and the SSTs a live
    query's floor decides later (`held`)."""

    def __init__(
        self, inputs: RetentionInputs, options: GcOptions, now: float, index: FileIndex, retained: set[str]
    ) -> None:
        self.inputs, self.options, self.now, self.index, self.retained = inputs, options, now, index, retained
        self.newest_version = inputs.latest_committed + 1
        self.live = options.live
        # The files the format names are its own: a V2 plan leaves those without ids alone.
        self.recognises = inputs.states.recognises
        self.kept: dict[str, Kept] = {}
        self.chosen: dict[str, Candidate] = {}
        self.held: dict[str, float] = {}

    def eligible(self, rel: str, mtime: float | None) -> bool:
        # A file without an mtime is left alone: nothing tells an upload in progress from an old file.
        if mtime is None:
            self.kept[rel] = Kept.NO_MTIME
            return False
        if self.now - mtime < self.options.grace_seconds:
            self.kept[rel] = Kept.YOUNG
            return False
        return True

    def versions(self) -> None:
        """1. changelogs and zips (deltas and snapshots) of versions that no retained batch reads"""
        inputs, index, retained, kept, chosen = self.inputs, self.index, self.retained, self.kept, self.chosen
        newest_version, live, eligible, recognises = (
            self.newest_version,
            self.live,
            self.eligible,
            self.recognises,
        )
        of_kind = index.of_kind
        for f in (
            of_kind[FileKind.ZIP]
            + of_kind[FileKind.CHANGELOG]
            + of_kind[FileKind.DELTA]
            + of_kind[FileKind.SNAPSHOT]
        ):
            rel, what = f.info.rel, f.what
            if not recognises(what) or rel in retained:
                continue
            version = what.version
            if version is None or version > newest_version or not rel.startswith("state/"):
                continue  # a batch in flight
            reason = _version_reason(inputs, index, f)
            if live and version > newest_version - 2:
                kept[rel] = Kept.LIVE_RECENT_VERSION
            elif eligible(rel, f.info.mtime):
                chosen[rel] = _new(Candidate, (f, reason))

    def ssts(self) -> float | None:
        """2. SSTs no staying zip lists (a kept orphan zip still protects its SSTs); returns the
        oldest SST a retained zip lists, the live floor"""
        inputs, retained, kept, chosen, held = self.inputs, self.retained, self.kept, self.chosen, self.held
        live, options, eligible = self.live, self.options, self.eligible
        zips, ssts = self.index.of_kind[FileKind.ZIP], self.index.of_kind[FileKind.SST]
        listed_by_staying = {
            (_store_of(f), name)
            for f in zips
            if f.rel not in chosen
            for name in inputs.zip_ssts.get(f.rel) or ()
        }
        unknown_listing = {
            _store_of(f) for f in zips if f.rel not in chosen and inputs.zip_ssts.get(f.rel) is None
        }
        retained_sst_times = [f.info.mtime for f in ssts if f.info.rel in retained]
        oldest_retained_sst = min((t for t in retained_sst_times if t is not None), default=None)
        for f in ssts:
            rel = f.info.rel
            if rel in retained or not rel.startswith("state/"):
                continue
            sid = _store_of(f)
            if (sid, rel.rsplit("/", 1)[1]) in listed_by_staying or sid in unknown_listing:
                kept[rel] = Kept.LISTED_BY_KEPT_ZIP
                continue
            mtime = f.info.mtime
            # SPARK-55892: a running executor may reuse an SST it uploaded before the zip that lists it.
            if live and options.defer_live_ssts:
                if eligible(rel, mtime):
                    chosen[rel] = _new(Candidate, (f, Reason.UNREFERENCED_SST))
                    held[rel] = mtime or 0.0
                continue
            if live and (oldest_retained_sst is None or (mtime or 0) >= oldest_retained_sst):
                kept[rel] = Kept.LIVE_RECENT_SST
                continue
            if eligible(rel, mtime):
                chosen[rel] = _new(Candidate, (f, Reason.UNREFERENCED_SST))
        return oldest_retained_sst

    def sidecars(self) -> None:
        """3. sidecars follow their main file (Spark's .crc, then Hadoop's .crc of anything, .crc.crc too)"""
        retained, kept, chosen, held = self.retained, self.kept, self.chosen, self.held
        newest_version, live, eligible = self.newest_version, self.live, self.eligible
        by_rel, owners, recognises = self.index.by_rel, _SIDECAR_OWNERS, self.recognises
        for kind, main_of in SIDECAR_MAIN.items():
            for f in self.index.of_kind[kind]:
                info = f.info
                rel = info.rel
                if rel in retained or not rel.startswith("state/"):
                    continue
                main = main_of(rel)
                known = by_rel.get(main) if main else None
                owner = known.what if known else (classify(main) if main else None)
                owner_kind = owner.kind if owner else None
                if (
                    owner is None
                    or owner_kind not in owners
                    or not recognises(owner)
                    # A running query renames a temp file, then its crc: between the two, the
                    # crc's main is gone (deleting it there broke a live query in testing)
                    or (owner_kind == FileKind.SPARK_TEMP and live)
                ):
                    # Not ours: e.g. Hadoop's crc of a temp file Spark is about to rename into place.
                    kept[rel] = Kept.NOT_OURS
                    continue
                version = owner.version
                if live and version is not None and version > newest_version - 2:
                    kept[rel] = Kept.LIVE_RECENT_VERSION
                    continue
                of_main = chosen.get(main)
                if of_main is not None:
                    if eligible(rel, info.mtime):
                        chosen[rel] = _new(Candidate, (f, of_main.reason))
                        if main in held:
                            held[rel] = held[main]
                elif known is None:
                    if eligible(rel, info.mtime):
                        chosen[rel] = _new(Candidate, (f, Reason.STALE_SIDECAR))
                else:
                    kept.setdefault(rel, Kept.MAIN_KEPT)

    def killed_writes(self) -> None:
        """2b. format V1: Spark's own temp files of a write never renamed into place (a killed
        task or driver) of a stopped query, once older than the grace period; before the
        sidecars, whose Hadoop .crc follows them"""
        for f in self.index.of_kind[FileKind.SPARK_TEMP]:
            rel = f.info.rel
            if not rel.startswith("state/") or not self.recognises(f.what):
                continue
            if self.live:  # no age tells a killed write from one in progress: only a stopped query's go
                self.kept[rel] = Kept.LIVE_TEMP
            elif self.eligible(rel, f.info.mtime):
                self.chosen[rel] = _new(Candidate, (f, Reason.KILLED_WRITE))

    def temps(self) -> None:
        """4. this tool's own temp files, left by a crash while publishing a snapshot"""
        for f in self.index.of_kind[FileKind.MAINT_TEMP]:
            if f.info.rel.startswith("state/") and self.eligible(f.info.rel, f.info.mtime):
                self.chosen[f.info.rel] = _new(Candidate, (f, Reason.ABANDONED_TEMP))


# A .crc is a candidate only beside one of these: never beside this tool's temp files or unknown
# files (Spark's temp files: format V1 only).
_SIDECAR_OWNERS = frozenset({FileKind.CHANGELOG, FileKind.ZIP, FileKind.DELTA, FileKind.SNAPSHOT,
                             FileKind.SST, FileKind.SPARK_CRC, FileKind.SPARK_TEMP})  # fmt: skip


def _version_reason(inputs: RetentionInputs, index: FileIndex, f: CheckpointFile) -> Reason:
    sid, version = _store_of(f), f.what.version
    if sid is None or version is None:  # not a state file: never a candidate of its own
        return Reason.BELOW_RETENTION
    stores = inputs.committed.get(version - 1)
    committed = stores.get(sid) if stores else None
    if committed is None or committed == f.what.unique_id:
        return Reason.BELOW_RETENTION
    winner = index.get(sid, FileKind.CHANGELOG, version, committed) or index.get(
        sid, FileKind.ZIP, version, committed
    )
    if (
        winner
        and winner.info.mtime is not None
        and f.info.mtime is not None
        and f.info.mtime > winner.info.mtime
    ):
        return Reason.SUPERSEDED
    return Reason.UNCOMMITTED_ATTEMPT
