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

import re
import resource
import shutil
import tempfile
import time
import zipfile
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice, repeat
from pathlib import Path
from typing import Any

from checkpoint.compaction.publish import ZipTarget, publish
from checkpoint.errors import RebuildError
from checkpoint.format.changelog import RecordRun
from checkpoint.format.crc import check_hadoop_crc
from checkpoint.format.layout import FileKind
from checkpoint.format.providers import Provider
from checkpoint.format.snapshot import (
    ZIP_ERRORS,
    SnapshotMetadata,
    parse_zip_metadata,
    read_metadata_entry,
)
from checkpoint.model.checkpoint import Checkpoint, CheckpointFile
from checkpoint.model.lineage import StoreLineage
from checkpoint.policy import POLICY, Policy

MERGE_VERSION_CONF = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"
_DELIMITERS = {None: b",", "1": b",", "2": b""}  # StringAppendOperator's delimiter per version
# What a Spark 4.x OPTIONS file says for the settings the rebuild changes; the published OPTIONS
# get back the base's own values (these, for a store built without a base).
SPARK_OPTIONS = {
    "memtable_factory": "SkipListFactory",
    "allow_concurrent_memtable_write": "true",
    "write_buffer_size": "67108864",
    "max_write_buffer_number": "2",
    "disable_auto_compactions": "false",
    "cache_index_and_filter_blocks": "false",
}


def bulk_options(policy: Policy, delimiter: bytes) -> dict[str, str]:
    """The rebuild's own settings. A vector memtable takes appends and sorts once at flush (random
    inserts into Spark's skip list cost 1.7 times as much); a bounded memtable flushes a large chain
    to several SSTs; with compactions off the base's SSTs are never rewritten."""
    return {
        # docs/compaction.md, rebuild note 1: RocksDB reads the merge operator from the newest
        # OPTIONS file, and Spark's says StringAppendOperator without a delimiter, which means ","
        # - not what mergeOperatorVersion 2 uses.
        "merge_operator": f"{{id=StringAppendOperator;delimiter={delimiter.decode()};}}",
        "memtable_factory": "{id=VectorRepFactory;count=0;}",
        "allow_concurrent_memtable_write": "false",
        "write_buffer_size": str(policy.rebuild_memtable_bytes),
        "max_write_buffer_number": "2",
        "disable_auto_compactions": "true",
        # Index and bloom-filter blocks grow with the store: in the bounded block cache, not beside it.
        "cache_index_and_filter_blocks": "true",
    }


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


def merge_delimiter(conf: dict[str, str]) -> bytes:
    version = conf.get(MERGE_VERSION_CONF)
    if version not in _DELIMITERS:
        raise RebuildError(f"unknown {MERGE_VERSION_CONF}={version!r}: the merge semantics are not known")
    return _DELIMITERS[version]


def _new_db_options(policy: Policy):
    """A store without a base starts from an empty RocksDB: Spark 4.x's table format (block-based,
    format_version 5, 4 KiB blocks, 10-bit bloom filter, LZ4) with the rebuild's bounded memory."""
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(5)
    table.set_block_size(4096)
    table.set_bloom_filter(10, False)
    table.set_block_cache(rocksdict.Cache(policy.rebuild_block_cache_bytes))
    table.set_cache_index_and_filter_blocks(True)  # as bulk_options: the cache bounds them too
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_memtable_factory(rocksdict.MemtableFactory.vector())
    opts.set_allow_concurrent_memtable_write(False)  # a vector memtable refuses concurrent writes
    opts.set_write_buffer_size(policy.rebuild_memtable_bytes)
    opts.set_max_write_buffer_number(2)
    opts.set_disable_auto_compactions(True)
    opts.create_if_missing(True)
    return opts


def open_db(folder: Path, policy: Policy, *, read_only: bool = False):
    """RocksDB over `folder`. An existing DB takes its column-family options (merge operator,
    table format, memtable) from its newest OPTIONS file, which the rebuild rewrites first; the
    block cache, which OPTIONS files do not carry, is passed here so that its size is ours."""
    import rocksdict

    kwargs: dict[str, Any] = {}
    if read_only:
        kwargs["access_type"] = rocksdict.AccessType.read_only(False)
    if not any(folder.glob("OPTIONS-*")):
        return rocksdict.Rdict(str(folder), options=_new_db_options(policy), **kwargs)
    cache = rocksdict.Cache(policy.rebuild_block_cache_bytes)
    _, families = rocksdict.Options.load_latest(str(folder), rocksdict.Env(), False, cache)
    options = rocksdict.Options(raw_mode=True)
    options.set_allow_concurrent_memtable_write(False)  # a DB option that the vector memtable needs
    return rocksdict.Rdict(str(folder), options=options, column_families=families, **kwargs)


def _option_values(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """The values of `name=value` lines in a RocksDB folder's newest OPTIONS file."""
    files = sorted(folder.glob("OPTIONS-*"))
    text = files[-1].read_text() if files else ""
    found = {}
    for name in names:
        m = re.search(rf"^\s*{name}=(.*)$", text, re.MULTILINE)
        if m:
            found[name] = m.group(1)
    return found


def set_options(folder: Path, values: dict[str, str]) -> None:
    """Sets `name=value` lines in every OPTIONS file of a RocksDB folder."""
    for options in folder.glob("OPTIONS-*"):
        text = options.read_text()
        for name, value in values.items():
            line = re.compile(rf"^(\s*){name}=.*$", re.MULTILINE)
            text = line.sub(lambda m: f"{m.group(1)}{name}={value}", text)  # noqa: B023 - used at once
        options.write_text(text)


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


def write_in_batches(
    db, write_opts, per_batch: int, op: str, keys: list[bytes], *values: list[bytes]
) -> None:
    """Bounded batches, so a large chain is not one giant allocation; the calls are made in C."""
    import rocksdict

    for start in range(0, len(keys), per_batch):
        batch = rocksdict.WriteBatch(raw_mode=True)  # a written batch is consumed: one per write
        end = start + per_batch
        deque(map(getattr(batch, op), keys[start:end], *(v[start:end] for v in values)), maxlen=0)
        db.write(batch, write_opts)


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


@dataclass(frozen=True)
class FetchedBase:
    meta: SnapshotMetadata
    ssts: dict[str, int]  # local name -> CRC32C of the bytes copied, each checked against the zip's size
    bytes_read: int


def rebuild_store(
    ckpt: Checkpoint, entry: StoreLineage, workdir: str | None = None, policy: Policy = POLICY
) -> RebuildResult:
    """Rebuilds the committed (version, id) of one store as a snapshot zip and publishes it."""
    import rocksdict

    started = time.monotonic()
    reset_peak_rss()
    if ckpt.provider != Provider.ROCKSDB or (ckpt.format_version == 2) != (entry.unique_id is not None):
        raise RebuildError(f"{entry.store}: not a RocksDB store ({ckpt.state_format})", ckpt.url)
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
        restore = {**SPARK_OPTIONS, **_option_values(db_dir, SPARK_OPTIONS)}
        set_options(db_dir, bulk_options(policy, delimiter))
        changelogs = [ckpt.read_changelog_runs(f, ckpt.read_verified(f.rel))[1] for f in entry.chain]
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


def check_free_disk(tmp: Path, base_bytes: int, chain_bytes: int, url: str) -> None:
    """The base is on disk twice at most (downloaded, then the new SSTs beside it), plus the chain."""
    need = 2 * base_bytes + chain_bytes
    free = shutil.disk_usage(tmp).free
    if free < need:
        raise RebuildError(
            f"not enough free disk in {tmp.parent} for this store: about {need:,} bytes needed (base x 2 + "
            f"chain), {free:,} free; point TMPDIR at a larger disk",
            url,
        )


def check_hadoop_checksum(ckpt: Checkpoint, rel: str, local: str) -> None:
    """A local copy of `rel` against Hadoop's hidden `.<name>.crc`, where the storage keeps
    them (a local disk) and one was written. Spark's providers read state files without it
    (seen: a delta with a byte changed in its LZ4 end mark loads), so a copy that this tool
    writes from is checked here. Raises CorruptFileError."""
    folder, _, name = rel.rpartition("/")
    hidden = f"{folder}/.{name}.crc" if folder else f".{name}.crc"
    if ckpt.storage.backend.hidden_checksums and (crc := ckpt.storage.read_if_exists(hidden)) is not None:
        with open(local, "rb") as fh:
            check_hadoop_crc(fh.read, crc, ckpt.storage.full(rel))


def download_checked(ckpt: Checkpoint, rel: str, local: str, size: int | None, policy: Policy) -> int:
    """A state file copied to local disk in chunks and checked against every checksum it has:
    Spark's `.crc` sidecar (format V2) and Hadoop's hidden one (a local disk). Returns the bytes;
    `size`, when known, spares a HEAD on object stores."""
    read = ckpt.download_verified(rel, local, size or None, policy.copy_chunk_bytes)
    check_hadoop_checksum(ckpt, rel, local)
    return read


def fetch_base(
    ckpt: Checkpoint, base: CheckpointFile, folder: str, tmp: Path, policy: Policy, chain_bytes: int
) -> FetchedBase:
    """The base zip's RocksDB files and SSTs in `tmp/db`, streamed to disk in chunks: the zip checked
    against its checksums, each SST against the size the zip lists and Hadoop's checksum."""
    rel = base.rel
    db_dir, local_zip = tmp / "db", tmp / "base.zip"
    read = download_checked(ckpt, rel, str(local_zip), base.info.size, policy)
    try:
        with zipfile.ZipFile(local_zip) as zf:
            meta = parse_zip_metadata(read_metadata_entry(zf, ckpt.storage.full(rel)), ckpt.storage.full(rel))
            check_free_disk(tmp, read + sum(s.size for s in meta.sst_files), chain_bytes, ckpt.url)
            for info in zf.infolist():
                name = info.filename
                if "/" in name or name.startswith("."):
                    raise RebuildError(f"unexpected entry {name!r} in {rel}", ckpt.url)
                if name != "metadata":
                    with zf.open(info) as src, open(db_dir / name, "wb") as out:
                        shutil.copyfileobj(src, out, policy.copy_chunk_bytes)
    except ZIP_ERRORS as exc:
        raise RebuildError(f"unreadable base zip: {exc}", ckpt.storage.full(rel)) from exc
    finally:
        local_zip.unlink(missing_ok=True)

    def fetch(sst) -> tuple[str, int]:
        # Spark writes no sidecars for SSTs: the size the zip lists is the check (a file longer or
        # shorter than that fails the download), with Hadoop's checksum where there is one.
        dfs, local = f"{folder}/SSTs/{sst.dfs_name}", str(db_dir / sst.local_name)
        crc = ckpt.storage.download(dfs, local, sst.size, policy.copy_chunk_bytes)[1]
        check_hadoop_checksum(ckpt, dfs, local)
        return sst.local_name, crc

    with ThreadPoolExecutor(max(1, policy.copy_workers)) as pool:
        ssts = dict(pool.map(fetch, meta.sst_files))
    return FetchedBase(meta, ssts, read + sum(s.size for s in meta.sst_files))


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
    mapping = base_meta.column_family_mapping if base_meta else {}
    types = base_meta.column_family_type_map if base_meta else {}
    if mapping:
        internal_ids = {cf_id for name, cf_id in mapping.items() if types.get(name)}
        known = set(mapping.values())

        def is_internal(key: bytes) -> bool:
            cf = int.from_bytes(key[:2], "little")
            if cf not in known:
                raise RebuildError(f"key with unknown column family id {cf}")
            return cf in internal_ids

        moved = sum(map(is_internal, inserted)) - sum(map(is_internal, deleted))
    else:
        moved = 0
    keys, internal = keys + len(inserted) - len(deleted) - moved, internal + moved
    if keys < 0 or internal < 0:
        raise RebuildError(f"the key count comes out negative ({keys}, {internal}): the base's is wrong")
    return keys, internal
