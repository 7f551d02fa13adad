"""One store's state at the migrated batch, written as a RocksDB format V2 snapshot in DEST.

Spark cannot do this step: its state rewriter reads RocksDB only (the HDFS-backed store fails with
`UNSUPPORTED_PROVIDER`), and it writes in the format of the session it runs in, which must be the
read checkpoint's (V1). So the snapshot is written here, on the ground compaction's rebuild
stands on too (`checkpoint.rocksdb`): what recovery of the source loads (the base snapshot or zip,
then the deltas or changelogs in order) is put into RocksDB with Spark 4.x's table format and
published as `<v>_<id>.zip` plus its SSTs and `.crc`, each name checked free and written without
overwriting. Spark's own reader then proves it (`checkpoint.migrate.flow`).

The RocksDB provider stores a row as its UnsafeRow bytes behind one encoding-version byte (0),
key and value alike, where the HDFS-backed store keeps the bare UnsafeRow (seen: the same
aggregation's records in a delta, a V1 changelog and a V2 changelog differ by that byte only).
A store whose key is prefix-scanned (session windows: `numColsPrefixKey` > 0) is laid out by
Spark's prefix-scan encoder in RocksDB: the byte length of the encoded leading fields (a
native-order, i.e. little-endian, int), the row of those fields behind the encoding byte, then the
row of the others behind it (`PrefixKey`; seen on the same session-window query's state in both
providers, byte for byte). The HDFS-backed store keeps the key whole, so its keys are cut by the
key schema (`checkpoint.format.unsaferow`); from RocksDB V1 the bytes are RocksDB's already and
are carried as they are.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoint.errors import CorruptFileError, RebuildError
from checkpoint.format import (
    ByEngine,
    RecordRun,
    RowShape,
    SnapshotMetadata,
    split_row,
    stream_records,
)
from checkpoint.model import (
    Checkpoint,
    CheckpointFile,
    StoreId,
    StoreLineage,
    check_free_disk,
    download_checked,
)
from checkpoint.policy import POLICY, Policy
from checkpoint.rocksdb import (
    SPARK_OPTIONS,
    ZipTarget,
    bulk_options,
    fetch_base,
    merge_delimiter,
    open_db,
    publish,
    set_options,
    write_in_batches,
)

ROCKSDB_ENCODING = b"\x00"  # the version byte in front of every key and value RocksDB stores
_BATCH = 50_000


@dataclass(frozen=True)
class PrefixKey:
    """A prefix-scanned store's key layout: the key row's shape and how many fields lead."""

    shape: RowShape
    leading: int

    def encode(self, key: bytes, path: str) -> bytes:
        """The key as RocksDB's prefix-scan encoder stores it, from the whole key row."""
        head, rest = split_row(key, self.shape, self.leading, path)
        return (len(head) + 1).to_bytes(4, "little") + ROCKSDB_ENCODING + head + ROCKSDB_ENCODING + rest


class _AsStored:
    """A RocksDB store's files: its base zip's files become the DB its chain is replayed into, and
    its rows are RocksDB's already."""

    def base(self, base: CheckpointFile | None) -> CheckpointFile | None:
        """The zip whose files are the DB, or None: the base is replayed into an empty one."""
        return base

    def dumped(self, step: int, f: CheckpointFile) -> bool:
        """Whether `f`, replayed as step `step`, is a dump of the whole map (each record a distinct key)."""
        return False

    def keys(self, keys: Iterable[bytes], path: str) -> list[bytes]:
        return list(keys)

    def values(self, values: Iterable[bytes]) -> list[bytes]:
        return list(values)


@dataclass(frozen=True)
class _FromMaps(_AsStored):
    """The HDFS-backed store's files: its base a snapshot, a dump of Spark's map replayed into an
    empty DB; its rows UnsafeRows with no RocksDB encoding byte, a prefix-scanned store's key
    re-laid as RocksDB's prefix encoder lays it (`prefix`)."""

    prefix: PrefixKey | None

    def base(self, base: CheckpointFile | None) -> CheckpointFile | None:
        return None

    def dumped(self, step: int, f: CheckpointFile) -> bool:
        return step == 0 and f.kind.is_base

    def keys(self, keys: Iterable[bytes], path: str) -> list[bytes]:
        prefix = self.prefix
        if prefix is None:
            return [ROCKSDB_ENCODING + k for k in keys]
        return [prefix.encode(k, path) for k in keys]

    def values(self, values: Iterable[bytes]) -> list[bytes]:
        return [ROCKSDB_ENCODING + v for v in values]


def _as_stored(prefix: PrefixKey | None) -> _AsStored:
    return _AsStored()  # RocksDB lays out a prefix-scanned key itself: nothing to re-lay


# A RocksDB source's rows are RocksDB's already; the HDFS-backed store's maps need RocksDB's
# encoding byte, and a prefix-scanned key laid as RocksDB lays it.
_ROWS = ByEngine(hdfs=_FromMaps, rocksdb=_as_stored)


@dataclass(frozen=True)
class StoreWritten:
    operator: int
    partition: int
    store: str
    unique_id: str
    keys: int
    files: int  # read from the source
    bytes_read: int
    bytes_written: int
    seconds: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class StoreJob:
    """One store's part of a migration: SRC, the lineage entry whose version recovery loads, DEST's
    zip, the key layout."""

    ckpt: Checkpoint
    entry: StoreLineage
    target: ZipTarget
    prefix: PrefixKey | None = None

    def run(self) -> StoreWritten:
        return write_store(self.ckpt, self.entry, self.target, prefix=self.prefix)

    def to_ship(self) -> StoreJob:
        """The job with SRC narrowed to its store's files, for a task (built per job as it is
        shipped: every job shares the one model until then)."""
        return dataclasses.replace(self, ckpt=self.ckpt.for_store(self.entry.store))


def write_store(
    ckpt: Checkpoint,
    entry: StoreLineage,
    target: ZipTarget,
    workdir: str | None = None,
    policy: Policy = POLICY,
    prefix: PrefixKey | None = None,
) -> StoreWritten:
    """Writes what recovery of `entry`'s version loads in SRC (`ckpt`) as `target`'s zip; `prefix`
    is the key layout of a prefix-scanned store of the HDFS-backed store."""
    import rocksdict

    started = time.monotonic()
    policy = dataclasses.replace(policy, rebuild_memtable_bytes=policy.migrate_memtable_bytes)
    sid = entry.store
    if not entry.loadable:
        raise RebuildError(f"{sid}: the replay chain of version {entry.version} is incomplete", ckpt.url)
    rows = ckpt.states.engine.of(_ROWS)(prefix)
    base, chain = entry.base, list(entry.chain)
    if entry.committed_file is not None and entry.committed_file.kind.is_base:
        base, chain = entry.committed_file, []  # the version's own snapshot: nothing to replay
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-migrate-", dir=workdir))
    try:
        db_dir, checkpoint_dir = tmp / "db", tmp / "checkpoint"
        db_dir.mkdir()
        chain_bytes = sum(f.info.size for f in chain)
        zip_base = rows.base(base)
        op = ckpt.operators.get(sid.operator)
        families = op is not None and op.metadata is not None and op.metadata.keeps_column_families
        if families and zip_base is None:
            raise RebuildError(f"{sid}: no zip to load version {entry.version} from, and only a zip names "
                               "the column families' ids (a format V1 changelog does not): run the query "
                               "until Spark writes a snapshot, then migrate", ckpt.url)  # fmt: skip
        offset = ckpt.batches[entry.batch].offset
        delimiter = merge_delimiter(offset.conf if offset else {})
        if zip_base is not None:
            fetched = fetch_base(ckpt, zip_base, zip_base.rel.rsplit("/", 1)[0], tmp, policy, chain_bytes)
            set_options(db_dir, bulk_options(policy, delimiter))
            steps, read = chain, fetched.bytes_read + chain_bytes
        else:
            steps = ([base] if base is not None else []) + chain
            read = sum(f.info.size for f in steps)
            check_free_disk(tmp, 0, read, ckpt.url)
        db = open_db(db_dir, policy)
        # A store of column families is counted by family once written (`_family_counts`), not tracked.
        by_family = zip_base is not None and bool(fetched.meta.column_family_mapping)
        count = _KeyCount(fetched.meta.num_keys if zip_base is not None else 0, policy, track=not by_family)
        try:
            write_opts = rocksdict.WriteOptions()
            write_opts.disable_wal = True  # type: ignore[method-assign,assignment]
            if zip_base is not None:
                count.look_in(open_db(db_dir, policy, read_only=True))
            for i, f in enumerate(steps):
                where = ckpt.storage.full(f.rel)
                snapshot = rows.dumped(i, f)
                for run in _runs(ckpt, f, tmp, policy):
                    keys = rows.keys(run.keys, where)
                    if snapshot:
                        count.add(len(keys))
                    else:
                        count.touch(run.op, keys)
                    if run.op == "merge":  # list state, RocksDB's only: appended as its operator does
                        keys, values = _merged(db, keys, run.written, delimiter)
                        write_in_batches(db, write_opts, _BATCH, "put", keys, values)
                    elif run.op == "put":
                        values = rows.values(run.written)
                        write_in_batches(db, write_opts, _BATCH, "put", keys, values)
                    else:
                        write_in_batches(db, write_opts, _BATCH, "delete", keys)
                if snapshot:
                    db.flush()
                    count.look_in(open_db(db_dir, policy, read_only=True))
            db.flush()
            keys_now, internal = _family_counts(db, fetched.meta, sid) if by_family else (count.total(db), 0)
            rocksdict.Checkpoint(db).create_checkpoint(str(checkpoint_dir))
        finally:
            count.close()
            db.close()
        set_options(checkpoint_dir, SPARK_OPTIONS)
        # The base's SSTs are not in DEST: every SST is uploaded under a new name (a base without
        # any); its column families (transformWithState) carry over with their ids.
        mapping = None if zip_base is None else dataclasses.replace(fetched.meta, sst_files=())
        result = publish(target, checkpoint_dir, mapping, keys_now, internal)
        files = len(steps) + (0 if zip_base is None else 1)
        return StoreWritten(sid.operator, sid.partition, sid.store, str(target.unique_id), keys_now, files,
                            read, result["bytes"], round(time.monotonic() - started, 3))  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _family_counts(db, meta: SnapshotMetadata, sid: StoreId) -> tuple[int, int]:
    """(numKeys, numInternalKeys) of a store of column families, as Spark counts them: each key by
    its family (`SnapshotMetadata.family_of`), an internal family's apart. One pass over the store
    written, which a key count tracked through the chain would not be cheaper than."""
    keys = internal = 0
    for key in db.keys():
        try:
            internal_family = meta.family_of(key, str(sid))[1]
        except CorruptFileError as exc:
            raise RebuildError(str(exc)) from exc
        internal += internal_family
        keys += not internal_family
    return keys, internal


def _merged(db, keys: list[bytes], operands: list[bytes], delimiter: bytes) -> tuple[list, list]:
    """Merge records as RocksDB's StringAppendOperator applies them: each operand appended to the
    key's value (the DB's, or an earlier operand's of the run), with the store's delimiter."""
    merged: dict[bytes, bytes] = {}
    for key, operand in zip(keys, operands, strict=True):
        old = merged[key] if key in merged else db.get(key)
        merged[key] = operand if old is None else old + delimiter + operand
    return list(merged), list(merged.values())


class _KeyCount:
    """A store's key count (its zip's `numKeys`) without reading the store back: the base's (a
    RocksDB zip's own count, or a snapshot's records), then, for each key a later file touches,
    whether the base holds it and whether it is there after the last touch. The base is looked up
    in a read-only view of the DB as the base left it (the writer's vector memtable would make a
    lookup a scan). Memory follows the keys touched; past the policy's bound it falls back to
    counting the DB once it is written. The proof checks the sum over partitions against the
    rows Spark's reader finds."""

    def __init__(self, base: int, policy: Policy, *, track: bool = True):
        self.base, self.limit = base, policy.migrate_tracked_keys
        self.view: Any = None  # the base's read-only DB (rocksdict), once there is one to look in
        self.before: dict[bytes, bool] | None = {} if track else None
        self.after: dict[bytes, bool] = {}

    def add(self, records: int) -> None:
        self.base += records

    def look_in(self, view) -> None:
        self.view = view

    def touch(self, op: str, keys: list[bytes]) -> None:
        """Called before `keys` are written."""
        if self.before is None:
            return
        unseen = [k for k in dict.fromkeys(keys) if k not in self.before]
        if unseen:
            found = self.view.get(unseen) if self.view is not None else [None] * len(unseen)
            self.before.update(zip(unseen, (v is not None for v in found), strict=True))
        self.after.update(dict.fromkeys(keys, op != "delete"))
        if len(self.before) > self.limit:
            self.before = None
            self.after.clear()

    def close(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    def total(self, db) -> int:
        """The count, once every file is written into `db`."""
        if self.before is None:
            return sum(1 for _ in db.keys())
        before = self.before
        gained = sum(1 for k, alive in self.after.items() if alive and not before[k])
        lost = sum(1 for k, alive in self.after.items() if not alive and before[k])
        if self.base + gained - lost < 0:
            raise RebuildError(f"the key count comes out negative ({self.base} + {gained} - {lost}): the "
                               "base's is wrong")  # fmt: skip
        return self.base + gained - lost


def _runs(ckpt: Checkpoint, f: CheckpointFile, tmp: Path, policy: Policy) -> Iterator[RecordRun]:
    """The records of one source file in order, a part at a time: the file downloaded and checked
    (its Spark sidecar where it has one, Hadoop's hidden checksum on a local disk), then decoded
    from disk, so that a base snapshot of any size never sits in memory."""
    local = tmp / "step"
    try:
        download_checked(ckpt, f.rel, str(local), f.info.size, policy)
        with open(local, "rb") as fh:
            for runs in stream_records(f.kind, fh.read, ckpt.changelog_codec, ckpt.storage.full(f.rel)):
                yield from runs
    finally:
        local.unlink(missing_ok=True)
