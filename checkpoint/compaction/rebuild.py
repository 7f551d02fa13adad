"""Materialising `<V>_<U>.zip` (`<V>.zip` in format V1) for a committed store version: base zip +
changelog replay, in RocksDB. Spark's RocksDB provider cannot do this offline: it snapshots only
at a commit, of the version the commit writes, so a snapshot of the latest version would mean
writing the next one.

Follows the rebuild notes in `docs/compaction.md`: the merge operator's delimiter is set from the offset conf
before the base is opened (a wrong one corrupts list state silently), merges follow
StringAppendOperator's semantics, rocksdict's own config file stays out of the zip, and
column-family stores need a base zip for their family mapping.

Memory follows the chain, never the store. The base's files are streamed to local disk (their
CRC32C computed on the way) and opened in RocksDB with a bounded memtable and block cache and with
automatic compactions off, so the base's SSTs stay byte for byte what they were. Only the keys the
chain touches come into Python: read from the base by point lookups, replayed, and written back as
one net change per key (a store touched 1.2M times over 250k keys takes 250k writes), so the new
SSTs hold exactly those changes.

Before anything is published the new checkpoint is checked in bounded memory, independently of
the write path: every touched key read back from it equals a second replay done by a different
algorithm (newest record first) over the base values read before any write; the base's SSTs are
all still there, unchanged; the new SSTs hold no entry besides the changes; and the key count is
the base's plus those inserted minus those deleted. Publishing writes SSTs (new names), checks
them, then the zip under a temporary name that is linked into place without ever overwriting,
then its `.crc`.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice, repeat
from pathlib import Path

from checkpoint.errors import CorruptFileError, RebuildError
from checkpoint.format import (
    FileKind,
    RecordRun,
    SnapshotMetadata,
    StateAction,
)
from checkpoint.model import Checkpoint, StoreLineage, check_free_disk
from checkpoint.policy import POLICY, Policy
from checkpoint.rocksdb import (
    SPARK_OPTIONS,
    FetchedBase,
    ZipTarget,
    bulk_options,
    fetch_base,
    merge_delimiter,
    open_db,
    option_values,
    publish,
    set_options,
    write_in_batches,
)


@dataclass(frozen=True)
class Rewritten:
    """What a rewrite of a verified store left to publish: a RocksDB checkpoint folder, and how many
    keys and internal keys it removed from the store's counts."""

    folder: Path
    keys_removed: int
    internal_removed: int


# Edits a rebuilt store, verified, before it is published: given its checkpoint folder (RocksDB
# opens it with the store's merge operator), the base's metadata (its column families) and a work
# folder of its own, it writes a new checkpoint folder, or says None: nothing to change, nothing
# published. The expired-state purge is one.
Rewrite = Callable[[Path, "SnapshotMetadata | None", Path], "Rewritten | None"]


@dataclass(frozen=True)
class RebuildResult:
    operator: int
    partition: int
    store: str
    version: int
    unique_id: str | None  # None in format V1
    path: str  # the published zip
    seconds: float
    keys: int
    internal_keys: int
    records: int | None  # changelog records replayed; None where Spark's provider replayed them
    chain_length: int
    bytes_read: int
    bytes_written: int
    ssts_reused: int
    ssts_written: int
    touched_keys: int | None  # distinct keys the chain writes: what the rebuild holds in Python
    memtable_bytes: int
    block_cache_bytes: int
    peak_rss_bytes: int  # of the process that rebuilt the store, during the rebuild where Linux tells

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_BATCH_RECORDS = 100_000


def replay(base: dict[bytes, bytes], changelogs: Iterable[list[RecordRun]], delimiter: bytes) -> dict:
    """The store's content after the changelogs, oldest first, in Spark's order: a put replaces, a
    delete removes, a merge appends with StringAppendOperator's semantics (docs/compaction.md,
    rebuild note 3)."""
    state = dict(base)
    for runs in changelogs:
        for run in runs:
            if run.op == "put":
                state.update(zip(run.keys, run.written, strict=True))
            elif run.op == "delete":
                for key in run.keys:
                    state.pop(key, None)
            else:
                for key, operand in zip(run.keys, run.written, strict=True):
                    old = state.get(key)
                    state[key] = operand if old is None else old + delimiter + operand
    return state


def replay_newest_first(
    base: dict[bytes, bytes], changelogs: list[list[RecordRun]], delimiter: bytes
) -> dict[bytes, bytes]:
    """The same content computed from the other end, as the independent check of `replay`: a key's
    newest put or delete decides it, merge operands newer than that are collected and appended, and
    the base only fills in keys that no record decides. A different algorithm, not a second run of
    the same one, so a mistake in either shows as a difference."""
    decided: dict[bytes, bytes | None] = {}  # None: deleted
    operands: dict[bytes, list[bytes]] = {}  # newest first, for keys not yet decided

    def decide(key: bytes, value: bytes | None) -> None:
        newer = operands.pop(key, None)
        if newer:
            value = delimiter.join(([] if value is None else [value]) + newer[::-1])
        decided[key] = value

    for runs in reversed(changelogs):
        for run in reversed(runs):
            if run.op != "merge" and operands.keys().isdisjoint(run.keys):
                # the first writer from the end wins: setdefault, newest record first, in C
                values = reversed(run.values) if run.values is not None else repeat(None)
                deque(map(decided.setdefault, reversed(run.keys), values), maxlen=0)
                continue
            for i in range(len(run.keys) - 1, -1, -1):
                key = run.keys[i]
                if key in decided:
                    continue
                if run.op == "merge":
                    operands.setdefault(key, []).append(run.written[i])
                else:
                    decide(key, run.values[i] if run.values is not None else None)
    for key in list(operands):  # operands that no put or delete ends merge onto the base
        decide(key, base.get(key))
    content = {k: v for k, v in base.items() if k not in decided}
    content.update({k: v for k, v in decided.items() if v is not None})
    return content


def _write_changes(db, base: dict[bytes, bytes], content: dict[bytes, bytes], memtable_bytes: int) -> None:
    """Puts what changed against the base values of the touched keys and deletes what is gone: one
    memtable entry per changed key rather than one per record replayed."""
    import rocksdict

    write_opts = rocksdict.WriteOptions()
    # A property, although rocksdict's stub declares a method: the stub is wrong, not the call.
    write_opts.disable_wal = True  # type: ignore[method-assign,assignment]
    get = base.get
    changed = content if not base else {k: v for k, v in content.items() if get(k) != v}
    # RocksDB switches memtables between writes only: a batch's size bounds how far one overshoots.
    sample = list(islice(changed.items(), 1000))
    entry = max(1, sum(len(k) + len(v) for k, v in sample) // max(1, len(sample)))
    per_batch = min(_BATCH_RECORDS, max(1000, memtable_bytes // 8 // entry))
    write_in_batches(db, write_opts, per_batch, "put", list(changed), list(changed.values()))
    write_in_batches(db, write_opts, per_batch, "delete", list(base.keys() - content.keys()))


def _point_reads(db, keys: list[bytes]):
    """(key, value or None) for each key, by multi-gets of bounded size."""
    for start in range(0, len(keys), _BATCH_RECORDS):
        part = keys[start : start + _BATCH_RECORDS]
        yield from zip(part, db.get(part), strict=True)


def reset_peak_rss() -> None:
    # A Spark worker runs many tasks: Linux resets the process's peak RSS (VmHWM) on this write,
    # so the figure reported is this rebuild's, not the worker's lifetime's.
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rebuild_store(
    ckpt: Checkpoint, entry: StoreLineage, workdir: str | None = None, policy: Policy = POLICY
) -> RebuildResult:
    """Rebuilds the committed (version, id) of one store as a snapshot zip and publishes it."""
    done = _rebuild(ckpt, entry, workdir, policy, None)
    assert done is not None  # only a rewrite publishes nothing
    return done


def rewrite_store(
    ckpt: Checkpoint,
    entry: StoreLineage,
    rewrite: Rewrite,
    workdir: str | None = None,
    policy: Policy = POLICY,
) -> RebuildResult | None:
    """As `rebuild_store`, publishing what `rewrite` makes of the verified store instead; None when
    it changed nothing, and nothing was published."""
    return _rebuild(ckpt, entry, workdir, policy, rewrite)


def _rebuild(
    ckpt: Checkpoint, entry: StoreLineage, workdir: str | None, policy: Policy, rewrite: Rewrite | None
) -> RebuildResult | None:
    import rocksdict

    started = time.monotonic()
    reset_peak_rss()
    ckpt.states.refuse(StateAction.REBUILD, ckpt.url, str(entry.store))
    if not ckpt.states.names_by(entry.unique_id):
        raise RebuildError(f"{entry.store}: version {entry.version} is not named as "
                           f"{ckpt.state_format} names it", ckpt.url)  # fmt: skip
    if not entry.loadable:
        raise RebuildError(
            f"{entry.store}: the replay chain of version {entry.version} is incomplete", ckpt.url
        )
    store = ckpt.stores[entry.store]
    if store.file(FileKind.ZIP, entry.version, entry.unique_id) is not None:
        raise RebuildError(f"{entry.store}: version {entry.version} already has its snapshot", ckpt.url)
    if entry.committed_file is None:
        raise RebuildError(f"{entry.store}: version {entry.version} has no committed file", ckpt.url)
    folder = entry.committed_file.rel.rsplit("/", 1)[0]
    offset = ckpt.batches[entry.batch].offset
    conf = offset.conf if offset else {}
    delimiter = merge_delimiter(conf)
    cf_store = entry.header is not None and entry.header.has_column_families
    if cf_store and entry.base is None:
        raise RebuildError(
            f"{entry.store}: a column-family store needs a base zip for its family mapping", ckpt.url
        )

    tmp = Path(tempfile.mkdtemp(prefix="ckpt-rebuild-", dir=workdir))
    try:
        db_dir, checkpoint_dir = tmp / "db", tmp / "checkpoint"
        db_dir.mkdir()
        chain_bytes = sum(f.info.size for f in entry.chain)
        base = fetch_base(ckpt, entry.base, folder, tmp, policy, chain_bytes) if entry.base else None
        if base is None:
            check_free_disk(tmp, 0, chain_bytes, ckpt.url)
        restore = {**SPARK_OPTIONS, **option_values(db_dir, SPARK_OPTIONS)}
        set_options(db_dir, bulk_options(policy, delimiter))
        changelogs = [ckpt.read_changelog_runs(f, ckpt.read_verified(f))[1] for f in entry.chain]
        records = sum(len(run.keys) for runs in changelogs for run in runs)
        touched = list(set().union(*(run.keys for runs in changelogs for run in runs)))
        if base:  # looked up in the base: neighbouring keys share blocks (1.4 s for 561k keys, not 2.2)
            touched.sort()
        db = open_db(db_dir, policy)
        try:
            block_cache = db.property_int_value("rocksdb.block-cache-capacity") or 0
            # What the chain builds on, read before any write: the base value of each touched key.
            before = {k: v for k, v in _point_reads(db, touched) if v is not None} if base else {}
            _write_changes(db, before, replay(before, changelogs, delimiter), policy.rebuild_memtable_bytes)
            with ThreadPoolExecutor(1) as pool:
                # RocksDB's flush releases the GIL: the check's replay runs meanwhile
                check = pool.submit(replay_newest_first, before, changelogs, delimiter)
                db.flush()
                rocksdict.Checkpoint(db).create_checkpoint(str(checkpoint_dir))
                expected = check.result()
        finally:
            db.close()
        del changelogs
        set_options(checkpoint_dir, restore)
        _verify(ckpt, entry, checkpoint_dir, policy, base, touched, before, expected)
        keys, internal = _count_keys(base.meta if base else None, before, expected)
        if rewrite is not None:
            set_options(checkpoint_dir, bulk_options(policy, delimiter))  # its merge operator, to read
            done = rewrite(checkpoint_dir, base.meta if base else None, tmp)
            if done is None:
                return None
            checkpoint_dir = done.folder
            keys, internal = keys - done.keys_removed, internal - done.internal_removed
            set_options(checkpoint_dir, restore)
        target = ZipTarget.of(ckpt, entry, folder)
        result = publish(target, checkpoint_dir, base.meta if base else None, keys, internal)
        sid = entry.store
        return RebuildResult(
            operator=sid.operator, partition=sid.partition, store=sid.store, version=entry.version,
            unique_id=entry.unique_id, path=ckpt.storage.full(result["zip"]),
            seconds=round(time.monotonic() - started, 3), keys=keys, internal_keys=internal,
            records=records, chain_length=len(entry.chain),
            bytes_read=(base.bytes_read if base else 0) + chain_bytes,
            bytes_written=result["bytes"], ssts_reused=result["reused"], ssts_written=result["written"],
            touched_keys=len(touched), memtable_bytes=policy.rebuild_memtable_bytes,
            block_cache_bytes=block_cache, peak_rss_bytes=peak_rss(),
        )  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _verify(
    ckpt: Checkpoint,
    entry: StoreLineage,
    checkpoint_dir: Path,
    policy: Policy,
    base: FetchedBase | None,
    touched: list[bytes],
    before: dict[bytes, bytes],
    expected: dict[bytes, bytes],
) -> None:
    """What RocksDB reads back from the new checkpoint's files, in memory for the chain only: the
    touched keys against the independent replay, and the rest by what the files must be."""
    import crc32c

    def refuse(why: str):
        return RebuildError(f"{entry.store}: {why}", ckpt.url)

    if any(p.stat().st_size for p in checkpoint_dir.glob("*.log")):
        raise refuse("the new checkpoint has a non-empty WAL; its SSTs do not hold all of the store")
    db = open_db(checkpoint_dir, policy, read_only=True)
    try:
        live = {f["name"].lstrip("/"): f for f in db.live_files()}
        if base is None:
            # Without a base the store holds the chain's keys only: one ordered scan reads them all
            # several times faster than lookups, and shows a key that should not be there.
            found, differ = 0, 0
            for k, v in db.items():
                want = expected.get(k)
                found += want is not None
                differ += want != v
            differ += len(expected) - found
        else:
            differ = sum(1 for k, v in _point_reads(db, touched) if v != expected.get(k))
    finally:
        db.close()
    if differ:
        raise refuse(f"the rebuilt store differs from an independent replay in {differ} keys")
    base_ssts = base.ssts if base else {}
    # The keys the chain never touched are the base's: its SSTs are all still live, byte for byte...
    for name, crc in base_ssts.items():
        path = checkpoint_dir / name
        if name not in live or not path.exists():
            raise refuse(f"base SST {name} is no longer part of the store (compacted during the rebuild)")
        with open(path, "rb") as f:
            value = 0
            while block := f.read(policy.copy_chunk_bytes):
                value = crc32c.crc32c(block, value)
        if value != crc:
            raise refuse(f"base SST {name} changed during the rebuild")
    # ...and the new SSTs hold one entry per key the chain changes, and nothing else.
    entries = sum(f["num_entries"] for n, f in live.items() if n not in base_ssts)
    # without a base every key the store ends with is a change
    changes = sum(1 for k in touched if expected.get(k) != before.get(k)) if before else len(expected)
    if entries != changes:
        raise refuse(f"the new SSTs hold {entries} entries, not one per key the chain changes ({changes})")


def _count_keys(
    base_meta: SnapshotMetadata | None, before: dict[bytes, bytes], expected: dict[bytes, bytes]
) -> tuple[int, int]:
    """(numKeys, numInternalKeys): the base's, plus the keys the chain inserts, minus those it
    deletes. Column-family stores count by each key's family id and its type."""
    inserted = [k for k in expected if k not in before]
    deleted = [k for k in before if k not in expected]
    keys, internal = (base_meta.num_keys, base_meta.num_internal_keys) if base_meta else (0, 0)
    if base_meta is not None and base_meta.column_family_mapping:

        def is_internal(key: bytes) -> bool:
            try:
                return base_meta.family_of(key, "the rebuilt store")[1]
            except CorruptFileError as exc:
                raise RebuildError(str(exc)) from exc

        moved = sum(map(is_internal, inserted)) - sum(map(is_internal, deleted))
    else:
        moved = 0
    keys, internal = keys + len(inserted) - len(deleted) - moved, internal + moved
    if keys < 0 or internal < 0:
        raise RebuildError(f"the key count comes out negative ({keys}, {internal}): the base's is wrong")
    return keys, internal
