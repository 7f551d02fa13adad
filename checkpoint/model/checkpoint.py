"""The immutable model of one checkpoint: its logs, operators and the state files it was built from.

checkpoint -> batches (planned, committed) -> operators -> partitions -> stores -> state files by
(version, uuid). The committed uuid of each (version, store) comes from the commit log, whose ids per
partition follow the operator's store order (docs/format.md §2).

Two scopes. `load_checkpoint` lists everything (`Scope.LISTING`): what cleanup planning and `inspect`
need. `checkpoint.model.head.load_head` lists only the logs and names the state files recovery reads at
chosen batches (`Scope.RECOVERY`): its `files` hold exactly those, so lineage and validation run on it
unchanged, while anything that needs every file (cleanup) refuses it.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from checkpoint.errors import (
    CheckpointError,
    CorruptFileError,
    NotACheckpointError,
    NotARegularFileError,
    OutsideCheckpointError,
    UntrustedFileError,
)
from checkpoint.format import (
    PROVIDER_CONF,
    CommitEntry,
    FileKind,
    OffsetEntry,
    Provider,
    StateFormat,
    is_number,
    parse_commit,
    parse_offset,
    parse_query_metadata,
    state_format_of,
)
from checkpoint.model.files import CheckpointFile, Store, StoreId, group_stores
from checkpoint.model.operators import FileProblem, Operator, metadata_parser, operators_of
from checkpoint.model.reading import StateFileReads
from checkpoint.model.scopes import Listing, Scope, StateFolders, state_folders_of
from checkpoint.policy import POLICY
from checkpoint.storage import FileInfo, Storage


@dataclass(frozen=True)
class Batch:
    id: int
    offset: OffsetEntry | None
    commit: CommitEntry | None

    @property
    def planned(self) -> bool:
        return self.offset is not None

    @property
    def committed(self) -> bool:
        return self.commit is not None


@dataclass(frozen=True)
class Checkpoint(StateFileReads):
    url: str
    query_id: str | None
    format_version: int
    files: tuple[CheckpointFile, ...]
    batches: dict[int, Batch]
    operators: dict[int, Operator]
    stores: dict[StoreId, Store] = field(repr=False)
    storage: Storage = field(repr=False, compare=False)
    problems: tuple[FileProblem, ...] = ()
    scope: Scope = Scope.LISTING
    # The operator folders `state/<op>` found and what they hold: one without operator metadata
    # has stores this tool cannot name (a checkpoint last run before Spark 4.0), and a partition or
    # store folder that the logs and metadata do not name is state no action may guess about.
    state_folders: dict[int, StateFolders] = field(default_factory=dict)
    resolved_batches: frozenset[int] = frozenset()  # Scope.RECOVERY: the batches whose files are known
    # Parsed headers and snapshots (or the error reading them) that the loader already read.
    prefetched: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def for_store(self, sid: StoreId) -> Checkpoint:
        """This checkpoint narrowed to one store's files: what a rebuild task needs shipped to it."""
        store = self.stores.get(sid) or Store(sid, ())
        mine = {f.rel for f in store.files}
        return dataclasses.replace(
            self,
            files=tuple(f for f in self.files if f.what.operator is None or f.rel in mine),
            stores={sid: store},
            prefetched={rel: v for rel, v in self.prefetched.items() if rel in mine},
        )

    @property
    def operator_folders(self) -> frozenset[int]:
        return frozenset(self.state_folders)

    def knows_files_of(self, batch: int) -> bool:
        """Whether the state files recovery reads at `batch` are in `files` (always, for a listing)."""
        return self.scope == Scope.LISTING or batch in self.resolved_batches

    @property
    def latest_planned_batch(self) -> int | None:
        planned = [b.id for b in self.batches.values() if b.planned]
        return max(planned) if planned else None

    @property
    def latest_committed_batch(self) -> int | None:
        committed = [b.id for b in self.batches.values() if b.committed]
        return max(committed) if committed else None

    @property
    def newest_offsets(self) -> OffsetEntry | None:
        """The newest offset file that parsed: the batch a restart plans from (or replays)."""
        planned = [b for b in self.batches.values() if b.offset is not None]
        return max(planned, key=lambda b: b.id).offset if planned else None

    @property
    def total_bytes(self) -> int:
        return sum(f.info.size for f in self.files)

    def count_by_kind(self) -> dict[str, int]:
        counts = Counter(f.kind.value for f in self.files)
        return {k.value: counts[k.value] for k in FileKind if counts[k.value]}

    def committed_unique_id(self, batch: int, store: StoreId) -> str | None:
        """The id committed for version batch+1 of a store; None for format V1 or an unknown batch."""
        entry = self.batches.get(batch)
        if entry is None or entry.commit is None or entry.commit.state_unique_ids is None:
            return None
        partitions = entry.commit.state_unique_ids.get(store.operator)
        op = self.operators.get(store.operator)
        if partitions is None or op is None or store.partition >= len(partitions):
            return None
        ids = partitions[store.partition]
        try:
            index = op.store_names.index(store.store)
        except ValueError:
            return None
        return ids[index] if index < len(ids) else None

    @property
    def last_commit_mtime(self) -> float | None:
        """When the newest dated commit file was written; None when no commit has a date."""
        return self._newest(FileKind.COMMIT)

    @property
    def last_activity_mtime(self) -> float | None:
        """When the newest dated commit or offset file was written; None when none has a date."""
        return self._newest(FileKind.COMMIT, FileKind.OFFSET)

    def _newest(self, *kinds: FileKind) -> float | None:
        return max(
            (f.info.mtime for f in self.files if f.kind in kinds and f.info.mtime is not None), default=None
        )

    @property
    def unfinished(self) -> bool:
        """A batch planned above the newest committed one (batch 0 with no commit among them): a
        running query's, or one that died mid-batch."""
        planned, committed = self.latest_planned_batch, self.latest_committed_batch
        return planned is not None and (committed is None or planned > committed)

    def is_live(self, now: float, quiet_seconds: float = POLICY.quiet_seconds) -> bool:
        """An unfinished batch, or a commit or offset written within the quiet period (or undated)."""
        if self.unfinished:
            return True
        times = [f.info.mtime for f in self.files if f.kind in (FileKind.COMMIT, FileKind.OFFSET)]
        return any(t is None or now - t < quiet_seconds for t in times)

    @cached_property
    def provider_class(self) -> str | None:
        """The provider class the newest offset file pins; None without an offset file naming one."""
        for batch in sorted(self.batches.values(), key=lambda b: -b.id):
            if batch.offset is not None and PROVIDER_CONF in batch.offset.conf:
                return batch.offset.conf[PROVIDER_CONF]
        return None

    @cached_property
    def _pins(self) -> list[tuple[int, str]]:
        """(batch, provider class) of every offset file that pins one, in batch order."""
        return sorted((b.id, b.offset.conf[PROVIDER_CONF]) for b in self.batches.values()
                      if b.offset is not None and PROVIDER_CONF in b.offset.conf)  # fmt: skip

    @cached_property
    def states(self) -> StateFormat:
        """How its state is kept (`checkpoint.format.states`), from its own logs: the provider the
        newest offset file pins, and the format its commit log and file names say."""
        return state_format_of(self.provider_class, self.format_version)

    def states_at(self, batch: int) -> StateFormat:
        """How the state of `batch` is kept, from that batch's own logs: the provider the newest
        offset file up to it pins, and the format its commit says. The same as `states` for every
        batch of a checkpoint Spark wrote, which never changes format; a migrated one
        (`ckpt migrate`) keeps the source's logs, in the source's format, up to its migration batch.
        A batch with no commit, or one whose offsets are gone, goes by the checkpoint's own."""
        at = bisect.bisect_right(self._pins, (batch, "\uffff"))
        provider = self._pins[at - 1][1] if at else self.provider_class
        entry = self.batches.get(batch)
        said = _format_said(entry.commit) if entry is not None and entry.commit is not None else None
        return state_format_of(provider, self.format_version if said is None else said)

    @property
    def provider(self) -> Provider:
        """The provider recovery uses."""
        return self.states.provider

    @property
    def state_format(self) -> str:
        """`<provider> V<format>` (`hdfs V1`, `rocksdb V2`): how its state is kept; `stateless`
        for a query with no stateful operator."""
        return self.states.name if self.operators else "stateless"


def load_checkpoint(
    where: str | Storage,
    storage_options: dict[str, Any] | None = None,
    *,
    strict: bool = True,
    listing: Listing | str = Listing.FLAT,
) -> Checkpoint:
    """Lists every file of the checkpoint and parses its commit, offset and metadata files.

    `where` is a URL (with `storage_options` for its filesystem) or an open Storage. Fails with
    NotACheckpointError when the path holds no query metadata and no offset log. A file it cannot
    parse raises a CheckpointError naming it, unless `strict` is off: validation then reports every
    such file in `problems` and models the rest. Anything that changes a checkpoint loads strictly.
    `listing`: see `Listing`.
    """
    try:
        listing = Listing(listing)
    except ValueError:
        raise ValueError(f"listing must be one of {[m.value for m in Listing]}, not {listing!r}") from None
    storage = where if isinstance(where, Storage) else Storage(where, storage_options)
    if listing == Listing.AUTO:
        # The partitions' prefixes side by side where listings run at once; else one walk.
        listing = Listing.PER_PARTITION if storage.width(POLICY.list_workers) > 1 else Listing.FLAT
    if listing == Listing.FLAT:
        infos = storage.list_files()
    else:
        infos = storage.list_tree(state_partition_folders)
    files = CheckpointFile.of_listing(infos)
    return build_checkpoint(storage, files, strict=strict)


def state_partition_folders(storage: Storage) -> list[str]:
    """`state/<op>/<part>` for every operator and partition: disjoint prefixes to list side by side."""
    out = []
    for op in storage.list_dir("state").folders:
        if is_number(op.rsplit("/", 1)[1], 10):
            out += [p for p in storage.list_dir(op).folders if is_number(p.rsplit("/", 1)[1], 10)]
    return out


def build_checkpoint(
    storage: Storage,
    files: tuple[CheckpointFile, ...],
    *,
    strict: bool = True,
    state_folders: dict[int, StateFolders] | None = None,
    unread: frozenset[str] = frozenset(),
) -> Checkpoint:
    """The model of `files`; `state_folders` are the `state/<op>` folders listed and what was seen
    in them (default: what `files` show, which a full listing gives). The log files in `unread`
    stay in `files`, by name, and are neither read nor parsed: their batches are not in `batches`."""
    by_kind: dict[FileKind, list[CheckpointFile]] = defaultdict(list)
    for f in files:
        if f.rel not in unread:
            by_kind[f.kind].append(f)
    if not by_kind[FileKind.QUERY_METADATA] and not by_kind[FileKind.OFFSET]:
        if by_kind[FileKind.FORK_MARKER]:
            raise NotACheckpointError(
                "an interrupted fork, not a checkpoint yet: run the same `ckpt fork` (or `ckpt migrate`) "
                "again to finish it",
                storage.url,
            )
        raise NotACheckpointError(
            "not a streaming checkpoint (no 'metadata' file and no offsets/)", storage.url
        )

    logs = by_kind[FileKind.QUERY_METADATA] + by_kind[FileKind.OFFSET] + by_kind[FileKind.COMMIT]
    logs += by_kind[FileKind.OPERATOR_METADATA]
    # Every listed file no read may open: a strict load (every action that writes) refuses the
    # checkpoint; a tolerant one (validation) reports each and leaves it out of the model.
    untrusted = untrusted_files(storage, [f.info for f in files])
    if untrusted and strict:
        raise untrusted[min(untrusted)]
    # Spark's log files are a few KB: a huge one is refused by its listed size, never read, and
    # one that grew since it was listed after the bound plus one byte.
    readable = (f.rel for f in logs if f.info.size <= POLICY.max_log_file_bytes and f.rel not in untrusted)
    contents = storage.read_many(readable, limit=POLICY.max_log_file_bytes)

    log_rels = {f.rel for f in logs} if untrusted else set()
    problems = [FileProblem(rel, exc) for rel, exc in sorted(untrusted.items()) if rel not in log_rels]

    def parse(f: CheckpointFile, parser):
        try:
            if f.rel in untrusted:
                raise untrusted[f.rel]
            if f.rel not in contents:
                limit = POLICY.max_log_file_bytes
                why = f"{f.info.size} bytes, more than the {limit} a log or metadata file of Spark's holds"
                raise CorruptFileError(why, storage.full(f.rel))
            return parser(contents[f.rel], storage.full(f.rel))
        except CheckpointError as exc:
            if strict:
                raise
            problems.append(FileProblem(f.rel, exc))
            return None

    query_ids = [parse(f, parse_query_metadata) for f in by_kind[FileKind.QUERY_METADATA]]
    offsets = {
        f.what.batch_id: entry
        for f in by_kind[FileKind.OFFSET]
        if (entry := parse(f, lambda data, path, b=f.what.batch_id: parse_offset(b, data, path))) is not None
    }
    commits = {
        f.what.batch_id: entry
        for f in by_kind[FileKind.COMMIT]
        if (entry := parse(f, lambda data, path, b=f.what.batch_id: parse_commit(b, data, path))) is not None
    }
    batches = {b: Batch(b, offsets.get(b), commits.get(b)) for b in sorted(set(offsets) | set(commits))}
    found = by_kind[FileKind.OPERATOR_METADATA]
    metadata = [(f, m) for f in found if (m := parse(f, metadata_parser(f.what.operator)))]
    # An untrusted log file stays, as an unreadable one does (the log checks know it is there);
    # an untrusted state file is as good as absent.
    kept = log_rels | unread  # an unread log file that is untrusted stays too, its problem said
    files = tuple(f for f in files if f.rel not in untrusted or f.rel in kept) if untrusted else files
    operators = operators_of(metadata, files, commits, problems, strict=strict)
    folders = state_folders_of(f.what for f in files) if state_folders is None else state_folders

    return Checkpoint(
        url=storage.url,
        query_id=query_ids[0] if query_ids else None,
        format_version=_format_version(commits, files),
        files=files,
        batches=batches,
        operators=operators,
        stores=group_stores(files),
        storage=storage,
        problems=tuple(problems),
        state_folders=dict(folders),
    )


def untrusted_files(storage: Storage, files: Sequence[FileInfo]) -> dict[str, UntrustedFileError]:
    """{rel: why} of the listed files no read may open: a FIFO, a device or a socket, and a link
    that resolves outside the checkpoint (one realpath per link; an object store has neither)."""
    out: dict[str, UntrustedFileError] = {
        f.rel: NotARegularFileError(
            "a FIFO, a device or a socket, not a regular file: not read", storage.full(f.rel)
        )
        for f in files
        if f.special
    }
    links = [f for f in files if f.link]
    for rel, real in storage.outside(links, "").items():
        out[rel] = OutsideCheckpointError(
            f"resolves to {real}, outside the checkpoint: not read", storage.full(rel)
        )
    return out


def _format_version(commits: dict[int, CommitEntry], files: tuple[CheckpointFile, ...]) -> int:
    # The offset conf does not record checkpointFormatVersion; the commit log and file names do. A
    # V2 commit says `v2` on its first line (and carries stateUniqueIds when stateful), a V1 one `v1`;
    # a later commit version (`v3`) is told apart by its ids and the state file names.
    if any(_format_said(c) == 2 for c in commits.values()):
        return 2
    # Of the state files, only V2's names carry an id (their sidecars' do too, and say nothing more).
    if any((f.kind.is_base or f.kind.is_step) and f.what.carries_id for f in files):
        return 2
    return 1


def _format_said(commit: CommitEntry) -> int | None:
    """The format version one commit says: 2 for `v2` or ids, 1 for `v1` without; None for a later
    version without ids, which the state file names tell apart."""
    if commit.version == 2 or commit.state_unique_ids is not None:
        return 2
    return 1 if commit.version == 1 else None
