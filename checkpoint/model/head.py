"""Head-first loading: the logs, then only the state files Spark's recovery reads.

What it costs does not grow with the checkpoint's history, only with its operators, stores and the
replay chains recovery walks at the chosen batches:
- one shallow listing each of the root, `commits/`, `offsets/`, `state/`, and each operator's
  `_metadata/` (and `_metadata/v2/` where it exists), then the commit, offset and metadata files;
- when the newest offsets name a file source, one shallow listing of `sources/` and of each source
  folder there a line may name (its number, or under source evolution its name), as the sources'
  own start lists them (`source_log_gaps`);
- per store and batch, files named from the commit log's `stateUniqueIds` (docs/format.md §7):
  a probe-and-read of `<V>_<U>.zip` and of each zip the lineage names (one GET each, a 404 for the
  absent ones), a stat and one ranged read of the committed changelog's header, a stat of each
  changelog of the replay chain, and a stat of each SST a found zip lists (and of `.crc` sidecars
  when asked).
With `logs=Logs.RECOVERY`, of the retained offset and commit files (a hundred batches of each by
Spark's default) only those a restart reads are read: the newest commit, the offsets of the newest
two batches and the newest offset; and the commit and offsets of each asked batch. The others are
listed, never read (a ranking's, a look's cost; validation reads them all).
Format V1 (RocksDB's `<v>.zip` and `<v>.changelog`, the HDFS-backed store's `<v>.snapshot` and
`<v>.delta`) names no ids, and which versions have a snapshot only a listing tells: per store, one
shallow listing of its folder (what Spark's own RocksDB recovery lists too), then a read of the
base zip and a stat of each SST it lists. Nothing outside the stores' folders is listed.
The result is a `Checkpoint` of scope `Scope.RECOVERY` whose `files` hold exactly what was found, so
lineage, validation and compaction planning run on it unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from checkpoint.errors import (
    CheckpointError,
    NotACheckpointError,
    OversizedFileError,
    StorageError,
    UntrustedFileError,
    read_failed,
)
from checkpoint.format import (
    FORK_COMPLETE,
    FORK_STARTED,
    RESERVED_FOLDERS,
    ZIP_WHOLE_BYTES,
    ByRecovery,
    FileKind,
    Snapshot,
    classify,
    is_batch_id,
    is_number,
    read_snapshot,
)
from checkpoint.model.checkpoint import (
    Checkpoint,
    CheckpointFile,
    Scope,
    StateFolders,
    Store,
    StoreId,
    build_checkpoint,
    group_stores,
    untrusted_files,
)
from checkpoint.model.lineage import listed_lineage, store_ids
from checkpoint.model.operators import FileProblem
from checkpoint.model.scopes import Logs
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report
from checkpoint.storage import FileInfo, Folder, Storage, carrying_watch

log = logging.getLogger(__name__)
_PROGRESS_EVERY = 100  # stores between progress lines


def latest_commit(storage: Storage) -> int | None:
    """The newest batch in `commits/`: one shallow listing, the whole cost of an idle sensor tick."""
    return newest_commit(storage)[0]


def newest_commit(storage: Storage) -> tuple[int | None, float | None]:
    """The newest batch in `commits/` and when its file was written (None: undated), from the same
    one shallow listing."""
    listing = storage.list_dir("commits")
    batches = [(int(name), f.mtime) for f in listing.files if is_batch_id(name := f.rel.rsplit("/", 1)[1])]
    if not batches:
        return None, None
    return max(batches, key=lambda b: b[0])


def store_folder(sid: StoreId) -> str:
    base = f"state/{sid.operator}/{sid.partition}"
    return base if sid.store == "default" else f"{base}/{sid.store}"


_LOG_ATTEMPTS = 3


def load_head(
    where: str | Storage,
    storage_options: dict[str, Any] | None = None,
    *,
    strict: bool = True,
    batches: Iterable[int] | None = None,
    recent: int = 1,
    sidecars: bool = False,
    workers: int = POLICY.store_workers,
    logs: Logs = Logs.ALL,
) -> Checkpoint:
    """The logs and the recovery set of `batches` (default: the `recent` newest committed ones).

    `strict` is load_checkpoint's: off, unparsable log files become `problems` for validation.
    `sidecars` also looks up the Spark `.crc` of every state file found (deep validation, rebuild).
    `logs` says which retained offset and commit files are read (`Logs`).
    """
    storage = where if isinstance(where, Storage) else Storage(where, storage_options)
    batches = None if batches is None else list(batches)
    for attempt in range(_LOG_ATTEMPTS):
        found, folders = _log_files(storage)
        log_files = CheckpointFile.of_listing(found)
        unread = _beyond_recovery(log_files, batches, recent) if logs == Logs.RECOVERY else frozenset()
        try:
            base = build_checkpoint(storage, log_files, strict=strict, state_folders=folders, unread=unread)
            break
        except StorageError as exc:
            # A live query's log retention deletes the oldest commit and offset files: one listed
            # a moment ago can be gone when read. The logs are listed and read again, whole; a
            # file that keeps vanishing fails the load.
            if "vanished" not in str(exc) or attempt == _LOG_ATTEMPTS - 1:
                raise
            log.info("%s: %s; reading the logs again", storage.url, exc)
    base = _with_source_logs(base.states.recovery.of(_STORE_FOLDERS)(base, storage), storage, strict)
    committed = sorted(b.id for b in base.batches.values() if b.committed)
    wanted = sorted(set(committed[-recent:] if batches is None else batches) & set(committed))
    # A store whose partition folder is not there has no file to look up: it reads as missing.
    listed = {op: seen.partitions for op, seen in base.state_folders.items() if seen.partitions is not None}
    named = {sid for b in wanted for sid in store_ids(base, b)}
    targets = sorted((s for s in named if s.partition in listed.get(s.operator, (s.partition,))), key=_order)
    resolver = _Resolver(base, wanted, sidecars=sidecars)
    width = max(1, min(workers, len(targets)))
    # One store (most checkpoints a fleet view or a sensor looks at) is read in this thread: a pool
    # per checkpoint costs more than its reads when thousands are loaded side by side.
    with contextlib.nullcontext(None) if width == 1 else ThreadPoolExecutor(width) as pool:
        done = (
            map(resolver.resolve, targets)
            if pool is None
            else pool.map(carrying_watch(resolver.resolve), targets)
        )
        for n, _ in enumerate(done, 1):
            if n % _PROGRESS_EVERY == 0:
                report(log, Progress("stores read", n, len(targets)), "%s: %d of %d stores read, %d requests",
                       storage.url, n, len(targets), storage.calls.total())  # fmt: skip
    state = tuple(sorted(resolver.found.values(), key=lambda f: f.rel))
    files = base.files + state
    refused = sorted(resolver.untrusted.items())
    if refused and strict:
        raise refused[0][1]
    return dataclasses.replace(
        base,
        problems=base.problems + tuple(FileProblem(rel, exc) for rel, exc in refused),
        files=files,
        stores=group_stores(files),
        scope=Scope.RECOVERY,
        resolved_batches=frozenset(wanted),
        prefetched=resolver.prefetched,
    )


def _beyond_recovery(
    listed: tuple[CheckpointFile, ...], batches: list[int] | None, recent: int
) -> frozenset[str]:
    """The offset and commit files neither a restart nor a look at `batches` (default: the `recent`
    newest committed) reads. Spark's restart reads the newest commit, the newest offsets and those
    of the batch before them (`MicroBatchExecution.populateStartOffsets`)."""
    ids: dict[FileKind, dict[int, str]] = {FileKind.OFFSET: {}, FileKind.COMMIT: {}}
    for f in listed:
        if f.kind in ids and f.what.batch is not None:
            ids[f.kind][f.what.batch] = f.rel
    offsets, commits = ids[FileKind.OFFSET], ids[FileKind.COMMIT]
    committed = sorted(commits)
    asked = committed[-recent:] if batches is None else [b for b in batches if b in commits]
    read_commits = {*asked, *committed[-1:]}
    read_offsets = {b - back for b in read_commits for back in (0, 1)} | {max(offsets, default=-1)}
    unread = [rel for b, rel in commits.items() if b not in read_commits]
    unread += [rel for b, rel in offsets.items() if b not in read_offsets]
    return frozenset(unread)


def _with_source_logs(ckpt: Checkpoint, storage: Storage, strict: bool) -> Checkpoint:
    """`ckpt` with the sources' logs its newest offsets may name, when it has a file source: what a
    restart lists and reads of them, which validation checks (a full listing holds them anyway).
    One listing of `sources/`, and one of each source folder a line may name: as many as the query
    has sources, however many lines a damaged offsets file holds."""
    newest = ckpt.newest_offsets
    if newest is None or not newest.file_sources:
        return ckpt
    listed: list[FileInfo] = []
    refused: dict[str, UntrustedFileError] = {}

    def listing(folder: str) -> Folder:
        try:
            return storage.list_dir(folder)
        except UntrustedFileError as exc:  # a link out, a loop: as absent, and said
            refused[folder] = exc
            return Folder((), (), False)

    top = listing("sources")
    listed += top.files  # a file or a link where a source's folder belongs is said too
    for folder in top.folders:
        if newest.may_name(folder.rsplit("/", 1)[1]):
            listed += listing(folder).files
    if not listed and not refused:
        return ckpt
    refused.update(untrusted_files(storage, listed))
    if refused and strict:
        raise refused[min(refused)]
    return dataclasses.replace(
        ckpt,
        files=ckpt.files + CheckpointFile.of_listing([f for f in listed if f.rel not in refused]),
        problems=ckpt.problems + tuple(FileProblem(rel, exc) for rel, exc in sorted(refused.items())),
    )


def _order(sid: StoreId) -> tuple[int, int, str]:
    return sid.operator, sid.partition, sid.store


def _log_files(storage: Storage) -> tuple[list[FileInfo], dict[int, StateFolders]]:
    """The query metadata, both logs and the operator metadata, from shallow listings only; and
    the operator folders under `state/` with their partition folders (one listing an operator,
    whatever the history: what the logs declare is checked against what is there)."""
    top = storage.list_dir("")
    if not top.exists:
        raise NotACheckpointError("no such directory", storage.url)
    files = [f for f in top.files if f.rel in ("metadata", FORK_STARTED, FORK_COMPLETE)]
    operators: dict[int, StateFolders] = {}
    for log_dir in ("offsets", "commits"):
        if log_dir in top.folders:
            files += storage.list_dir(log_dir).files
    if "state" in top.folders:
        for op in storage.list_dir("state").folders:
            if not is_number(op.rsplit("/", 1)[1], 10):
                continue
            inside = storage.list_dir(op)
            names = (p.rsplit("/", 1)[1] for p in inside.folders)
            partitions = frozenset(int(n) for n in names if is_number(n, 10))
            operators[int(op.rsplit("/", 1)[1])] = StateFolders(partitions)
            if f"{op}/_metadata" not in inside.folders:
                continue
            meta = storage.list_dir(f"{op}/_metadata")
            files += meta.files
            if f"{op}/_metadata/v2" in meta.folders:
                files += storage.list_dir(f"{op}/_metadata/v2").files
    return files, operators


def _with_store_folders(storage: Storage, folders: dict[int, StateFolders]) -> dict[int, StateFolders]:
    """Format V1 names its stores from operator metadata alone (its commits carry no ids): the
    store folders of each operator's first partition are listed to check them against it. Its
    recovery lists that folder anyway (its file names carry no id to look up)."""
    out = {}
    for op, seen in folders.items():
        stores: frozenset[str] | None = None
        if seen.partitions:
            listed = storage.list_dir(f"state/{op}/{min(seen.partitions)}")
            names = (f.rsplit("/", 1)[1] for f in listed.folders)
            stores = frozenset(n for n in names if n not in RESERVED_FOLDERS)
        out[op] = StateFolders(seen.partitions, stores)
    return out


def _store_folders_listed(ckpt: Checkpoint, storage: Storage) -> Checkpoint:
    return dataclasses.replace(ckpt, state_folders=_with_store_folders(storage, ckpt.state_folders))


def _store_folders_named(ckpt: Checkpoint, storage: Storage) -> Checkpoint:
    return ckpt


# A listed format's recovery lists each store's folder: the folders are listed first. A named
# format's commits name its stores.
_STORE_FOLDERS = ByRecovery(listed=_store_folders_listed, named=_store_folders_named)


class _Resolver:
    """Finds, per store, the files recovery reads at the wanted batches; one store per call."""

    def __init__(self, ckpt: Checkpoint, batches: list[int], *, sidecars: bool):
        self.ckpt, self.batches, self.sidecars = ckpt, batches, sidecars
        self.found: dict[str, CheckpointFile] = {}
        self.prefetched: dict[str, Any] = {}
        self.untrusted: dict[str, UntrustedFileError] = {}
        self._lock = threading.Lock()

    def resolve(self, sid: StoreId) -> None:
        # Per store, sequential: a store's lookups depend on each other (header, then zips, then
        # chain); the pool runs stores side by side. Two batches of one store share lookups.
        look = _Lookups(self.ckpt.storage, store_folder(sid))
        self.ckpt.states.recovery.of(_Resolver._FIND)(self, look, sid)
        for snap in look.prefetched.values():
            if isinstance(snap, Snapshot):
                for ref in snap.metadata.sst_files:
                    look.stat(f"{look.folder}/SSTs/{ref.dfs_name}")
        if self.sidecars:
            for f in [f for f in look.seen.values() if f is not None and f.what.version is not None]:
                look.stat(f"{f.rel}.crc")
        with self._lock:
            self.found.update((rel, f) for rel, f in look.seen.items() if f is not None)
            self.prefetched.update(look.prefetched)
            self.untrusted.update(look.untrusted)

    def _named(self, look: _Lookups, sid: StoreId) -> None:
        """Format V2: every file named from the commit log's ids and the lineage headers."""
        ids = ((batch, self.ckpt.committed_unique_id(batch, sid)) for batch in self.batches)
        # A commit that names no id for this store names no file of it.
        for batch, uid in self.ckpt.states.named(ids):
            version = batch + 1
            own_zip = look.zip(f"{look.folder}/{version}_{uid}.zip")
            changelog = look.stat(f"{look.folder}/{version}_{uid}.changelog")
            if changelog is None:
                continue
            try:
                header = look.prefetched[changelog.rel] = self.ckpt.read_changelog_header(changelog)
            except CheckpointError as exc:
                look.prefetched[changelog.rel] = exc
                continue
            lineage = header.lineage or ()
            newest = None
            for i in range(len(lineage) - 1, -1, -1):  # every zip a lineage names may be loaded
                zf = look.zip(f"{look.folder}/{lineage[i].version}_{lineage[i].unique_id}.zip")
                if zf is not None and newest is None:
                    newest = i
            if own_zip is None:
                start = 0 if newest is None else newest + 1
                for e in lineage[start:]:
                    look.stat(f"{look.folder}/{e.version}_{e.unique_id}.changelog")

    def _listed(self, look: _Lookups, sid: StoreId) -> None:
        """Format V1: the store folder's one listing, then what recovery reads of it."""
        listed = self.ckpt.storage.list_dir(look.folder).files
        look.untrusted.update(untrusted_files(self.ckpt.storage, listed))
        store = Store(sid, CheckpointFile.of_listing([f for f in listed if f.rel not in look.untrusted]))
        kinds = self.ckpt.states.files
        for batch in self.batches:
            entry = listed_lineage(store, batch, kinds)
            if entry.base is not None and entry.base.kind.lists_files:
                look.zip(entry.base.rel)  # first: it may be the committed file too
            for f in (entry.base, entry.committed_file, *entry.chain):
                if f is not None and f.rel not in look.seen:
                    look.add(f.rel, f.info)

    # A V1 store's folder is listed once, as its recovery lists it; a V2 store's files are
    # looked up by the names its commits and headers give, so its folder is never listed.
    _FIND = ByRecovery(listed=_listed, named=_named)


class _Lookups:
    """What one store's lookups found (None: looked up, absent) and the snapshots read on the way."""

    def __init__(self, storage: Storage, folder: str):
        self.storage, self.folder = storage, folder
        self.seen: dict[str, CheckpointFile | None] = {}
        self.prefetched: dict[str, Any] = {}
        # Files no read may open (a link outside, a FIFO): absent to the lineage, findings of
        # their own in validation, a refusal for every action that loads strictly
        self.untrusted: dict[str, UntrustedFileError] = {}

    def add(self, rel: str, info: FileInfo | None) -> CheckpointFile | None:
        self.seen[rel] = CheckpointFile(info, classify(rel)) if info is not None else None
        return self.seen[rel]

    def stat(self, rel: str) -> CheckpointFile | None:
        if rel in self.seen:
            return self.seen[rel]
        try:
            return self.add(rel, self.storage.stat(rel))
        except UntrustedFileError as exc:
            self.untrusted[rel] = exc
            return self.add(rel, None)

    def zip(self, rel: str) -> CheckpointFile | None:
        """A snapshot zip, read whole (it holds only RocksDB's small files) and parsed."""
        if rel in self.seen:
            return self.seen[rel]
        try:
            data = self.storage.read_if_exists(rel, limit=ZIP_WHOLE_BYTES)
        except OversizedFileError:  # more than its small files: its directory and metadata read by seeking
            found = self.stat(rel)
            if found is not None:
                self._streamed(found)
            return found
        except UntrustedFileError as exc:
            self.untrusted[rel] = exc
            data = None
        if data is None:
            return self.add(rel, None)
        try:
            self.prefetched[rel] = read_snapshot(io.BytesIO(data), self.storage.full(rel))
        except CheckpointError as exc:
            self.prefetched[rel] = exc
        return self.add(rel, FileInfo(rel, len(data), None))

    def _streamed(self, f: CheckpointFile) -> None:
        """A zip past what is read whole, parsed as its SSTs are needed: its central directory and
        metadata entry through a handle that seeks (a zip whose SSTs were not looked up had them
        all reported missing). The storage's failures pass; the bytes' are the zip's finding."""
        try:
            with self.storage.open(f.rel, size=f.info.size) as fh:
                self.prefetched[f.rel] = read_snapshot(fh, self.storage.full(f.rel))
        except CheckpointError as exc:
            if read_failed(exc):
                raise
            self.prefetched[f.rel] = exc
