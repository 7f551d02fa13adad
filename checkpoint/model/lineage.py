"""How Spark would load each store at a committed batch: the replay chain and what it costs.

Format V2 (docs/format.md §7): `<V>_<U>.zip` when it exists; otherwise the newest (v, id) of
the committed changelog's lineage that has a zip, then every changelog after it up to V; with no zip
in the lineage and a lineage that starts at version 1, a replay from the empty store.
Format V1 has no ids and no lineage: the newest `<v>.zip` at or below V, then `<v+1..V>.changelog`.
The HDFS-backed store (Spark's default provider, format V1 only) the same way: the newest
`<v>.snapshot` at or below V, then `<v+1..V>.delta`; with no snapshot, every delta from version 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from checkpoint.errors import CheckpointError, UnknownFormatVersionError, UntrustedFileError
from checkpoint.format import (
    LINEAGE_HEADER_CAP,
    ByRecovery,
    ChangelogHeader,
    FileKind,
    LineageEntry,
    StateFiles,
)
from checkpoint.model.checkpoint import Checkpoint, Operator
from checkpoint.model.files import CheckpointFile, Store, StoreId
from checkpoint.policy import POLICY


@dataclass(frozen=True)
class StoreLineage:
    store: StoreId
    batch: int
    version: int
    unique_id: str | None
    committed_file: CheckpointFile | None  # the committed zip (snapshot), else changelog (delta)
    header: ChangelogHeader | None  # of the committed changelog (V2)
    header_error: CheckpointError | None
    base: CheckpointFile | None  # the zip (snapshot) the load starts from; None: the empty store or no base
    chain: tuple[CheckpointFile, ...]  # changelogs (deltas) replayed after the base, ascending
    missing: tuple[tuple[int, str | None], ...]  # (version, id) the chain needs that does not exist
    no_base: bool  # no zip to start from, and the lineage does not reach version 1

    @property
    def snapshot_version(self) -> int | None:
        """The version the load starts from: the base zip's, 0 for the empty store, None when unknown."""
        if self.base is not None:
            return self.base.what.version
        return None if self.no_base or self.committed_file is None else 0

    @property
    def chain_length(self) -> int:
        return len(self.chain) + len(self.missing)

    @property
    def replay_bytes(self) -> int:
        return sum(f.info.size for f in self.chain)

    @property
    def lineage_header_bytes(self) -> int:
        return self.header.header_bytes if self.header else 0

    @property
    def header_cap_ratio(self) -> float:
        return self.lineage_header_bytes / LINEAGE_HEADER_CAP

    @property
    def loads_own_base(self) -> bool:
        """The committed version has its own zip (snapshot), which recovery loads, reading nothing
        else of the version: not its changelog (Spark 4.0.5 to 4.3.0 restarted copies with it
        truncated as untouched ones), so not its lineage header either."""
        return self.committed_file is not None and self.committed_file.kind.is_base

    @property
    def header_blocks(self) -> bool:
        """Whether the committed changelog's header error stops recovery: not where the version's
        own zip loads, unless it says a format this release does not know, or the file is one the
        door refuses to open (a link out, a FIFO, one past its bound), which blocks wherever it is."""
        if self.header_error is None:
            return False
        blocks_anywhere = (UnknownFormatVersionError, UntrustedFileError)
        return not self.loads_own_base or isinstance(self.header_error, blocks_anywhere)

    @property
    def loadable(self) -> bool:
        return (
            self.committed_file is not None
            and not self.header_blocks
            and not self.missing
            and not self.no_base
        )

    @property
    def problem(self) -> str | None:
        """Why recovery at this batch could not load the store, in words; None when it could."""
        if self.committed_file is None:
            return f"no state file of version {self.version} (the batch's own)"
        if self.header_blocks:
            return f"its lineage cannot be read: {self.header_error}"
        if self.missing:
            versions = ", ".join(str(v) for v, _ in self.missing[:5]) + (
                ", ..." if len(self.missing) > 5 else ""
            )
            return f"the chain needs {len(self.missing)} file(s) that do not exist (versions {versions})"
        if self.no_base:
            return "no snapshot to start from, and the lineage does not reach version 1"
        return None

    def as_dict(self) -> dict:
        return {
            "operator": self.store.operator,
            "partition": self.store.partition,
            "store": self.store.store,
            "version": self.version,
            "unique_id": self.unique_id,
            "snapshot_version": self.snapshot_version,
            "chain_length": self.chain_length,
            "replay_bytes": self.replay_bytes,
            "lineage_header_bytes": self.lineage_header_bytes,
            "problem": self.problem,
        }


def state_partitions(ckpt: Checkpoint, op: Operator, batch: int) -> int:
    """How many partitions Spark loads of an operator at a batch, read as Spark reads it: the
    commit's ids (format V2), else the count pinned in the batch's offsets, which Spark's own
    repartitioning changes per batch. The operator metadata only when the batch says neither: it
    is one file for every batch, and what it declares is cross-checked by validation."""
    entry = ckpt.batches.get(batch)
    ids = None if entry is None or entry.commit is None else (entry.commit.state_unique_ids or {}).get(op.id)
    if ids is not None:
        return len(ids)
    pinned = None if entry is None or entry.offset is None else entry.offset.shuffle_partitions
    return pinned if pinned is not None else (op.num_partitions or 0)


def partitions_named(ckpt: Checkpoint) -> dict[int, int]:
    """Operator -> the most partitions any batch in the logs has: a partition folder at or above
    it is one that nothing names."""
    return {
        op.id: max((state_partitions(ckpt, op, b) for b in ckpt.batches), default=op.num_partitions or 0)
        for op in ckpt.operators.values()
    }


def maintained_batches(ckpt: Checkpoint) -> list[int]:
    """The committed batches whose state this checkpoint's format reads. A migrated checkpoint
    (`ckpt migrate`) keeps the V1 commits of the batches before its migration batch (their
    format, `Checkpoint.states_at`, is the source's): Spark's restart reads only the newest, and
    they name no ids, so they are history that no V2 rule needs (their state was never copied),
    until Spark's log retention drops them."""
    committed = sorted(b.id for b in ckpt.batches.values() if b.committed)
    # By the format version alone: a batch counted as history is one whose state no rule keeps, so
    # a provider that differs with no other sign of a migration must not make one.
    history = [b for b in committed if not ckpt.states.reads_state_of(ckpt.states_at(b))]
    return [b for b in committed if b > history[-1]] if history else committed


def store_ids(ckpt: Checkpoint, batch: int) -> list[StoreId]:
    """Every store Spark loads at a batch: operators x partitions x stores, files present or not."""
    counts = {op.id: state_partitions(ckpt, op, batch) for op in ckpt.operators.values()}
    total = sum(counts[op.id] * len(op.store_names) for op in ckpt.operators.values())
    if total > POLICY.max_state_stores:
        per_op = ", ".join(f"operator {o}: {n:,} partitions" for o, n in counts.items())
        limit = POLICY.max_state_stores
        raise CheckpointError(
            f"batch {batch} names {total:,} stores ({per_op}), more than the {limit:,} this tool sizes "
            "anything by: refused before loading them",
            ckpt.url,
        )
    return [StoreId(op.id, p, name) for op in ckpt.operators.values() for p in range(counts[op.id])
            for name in op.store_names]  # fmt: skip


def checkpoint_lineage(ckpt: Checkpoint, batch: int | None = None) -> list[StoreLineage]:
    """The lineage of every store at a committed batch (default: the latest committed one)."""
    if batch is None:
        batch = ckpt.latest_committed_batch
    if batch is None:
        return []
    entry = ckpt.batches.get(batch)
    if entry is None or not entry.committed:
        raise CheckpointError(f"batch {batch} is not in the commit log", ckpt.storage.full("commits"))
    return [store_lineage(ckpt, sid, batch) for sid in store_ids(ckpt, batch)]


def store_lineage(ckpt: Checkpoint, sid: StoreId, batch: int) -> StoreLineage:
    if not ckpt.knows_files_of(batch):
        # A head-first model holds only the files of the batches it was loaded for: anything else
        # would read as missing files, i.e. as damage that is not there.
        raise CheckpointError(
            f"the state files of batch {batch} were not read (loaded for {sorted(ckpt.resolved_batches)})",
            ckpt.url,
        )
    store = ckpt.stores.get(sid) or Store(sid, ())
    return ckpt.states.recovery.of(_LINEAGE)(ckpt, store, batch)


def _listed(ckpt: Checkpoint, store: Store, batch: int) -> StoreLineage:
    return listed_lineage(store, batch, ckpt.states.files)


def _named(ckpt: Checkpoint, store: Store, batch: int) -> StoreLineage:
    """Format V2: the committed id's files, and the lineage its changelog's header names."""
    sid, version = store.id, batch + 1
    uid = ckpt.committed_unique_id(batch, sid)
    zip_file = store.file(FileKind.ZIP, version, uid)
    changelog = store.file(FileKind.CHANGELOG, version, uid)
    header, header_error = None, None
    if changelog is not None:
        try:
            header = ckpt.read_changelog_header(changelog)
        except CheckpointError as exc:
            header_error = exc
    done: dict[str, Any] = dict(
        store=sid, batch=batch, version=version, unique_id=uid, header=header, header_error=header_error
    )
    if zip_file is not None:
        return StoreLineage(
            committed_file=zip_file, base=zip_file, chain=(), missing=(), no_base=False, **done
        )
    if changelog is None or header is None or header.lineage is None:
        return StoreLineage(committed_file=changelog, base=None, chain=(), missing=(), no_base=False, **done)

    lineage = (*header.lineage, LineageEntry(version, uid or ""))
    base, start = None, 0
    for i in range(len(lineage) - 2, -1, -1):
        found = store.file(FileKind.ZIP, lineage[i].version, lineage[i].unique_id)
        if found is not None:
            base, start = found, i + 1
            break
    no_base = base is None and lineage[0].version != 1
    chain, missing = [], []
    for e in lineage[start:]:
        f = store.file(FileKind.CHANGELOG, e.version, e.unique_id)
        if f is None:
            missing.append((e.version, e.unique_id))
        else:
            chain.append(f)
    return StoreLineage(
        committed_file=changelog,
        base=base,
        chain=tuple(chain),
        missing=tuple(missing),
        no_base=no_base,
        **done,
    )


# V1's lineage is what the store's folder lists below a version; V2's is what the commit's id and
# its changelog's header name, whatever else the folder holds.
_LINEAGE = ByRecovery(listed=_listed, named=_named)

_MISSING_NAMED = 1000  # missing changelogs a V1 lineage names at most; one is enough to break it


def listed_lineage(store: Store, batch: int, kinds: StateFiles) -> StoreLineage:
    """Format V1, whose files name no id: from what the store's folder holds."""
    version = batch + 1
    bases = [v for v in store.by_version if v <= version and store.file(kinds.base, v, None)]
    base_version = max(bases, default=0)
    base = store.file(kinds.base, base_version, None) if base_version else None
    # Walked over the files there are, not over the versions: a version read from an absurd
    # batch id costs what the store holds, and only the first missing versions are named.
    in_range = (v for v in store.by_version if base_version < v <= version)
    found = {v: f for v in in_range if (f := store.file(kinds.step, v, None)) is not None}
    present = sorted(found)
    chain = [found[v] for v in present]
    missing: list[tuple[int, str | None]] = []
    for low, high in pairwise([base_version, *present, version + 1]):
        missing += [(v, None) for v in range(low + 1, min(high, low + 1 + _MISSING_NAMED - len(missing)))]
    committed = store.file(kinds.base, version, None) or store.file(kinds.step, version, None)
    return StoreLineage(
        store=store.id, batch=batch, version=version, unique_id=None, committed_file=committed, header=None,
        header_error=None, base=base, chain=tuple(chain), missing=tuple(missing), no_base=False,
    )  # fmt: skip
