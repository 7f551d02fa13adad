"""Materialising `<V>_<U>.zip` for a committed store version: base zip + changelog replay, in RocksDB.

Follows `shared/docs/rebuild-notes.md`: the merge operator's delimiter is set from the offset conf
before the base is opened (a wrong one corrupts list state silently), merges follow
StringAppendOperator's semantics, rocksdict's own config file stays out of the zip, and
column-family stores need a base zip for their family mapping.

The chain is replayed in Python and RocksDB receives only the net change per key: a store touched
1.2M times over 250k keys takes 250k memtable writes, not 1.2M (those were most of the rebuild's
time). Before anything is published, what RocksDB reads back from the new checkpoint's files must
equal a second replay done by a different algorithm (newest record first). Publishing writes SSTs
(new names), checks them, then the zip under a temporary name that is linked into place without
ever overwriting, then its `.crc`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
import zipfile
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

from .changelog import RecordRun
from .crc import crc32c_signed
from .errors import CheckpointError
from .layout import MAINT_TEMP_PREFIX, FileKind
from .lineage import StoreLineage
from .model import Checkpoint
from .snapshot import SnapshotMetadata, parse_zip_metadata

KILL_BEFORE_ZIP_ENV = "CKPT_REBUILD_KILL_BEFORE_ZIP"
MERGE_VERSION_CONF = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"
_DELIMITERS = {None: b",", "1": b",", "2": b""}  # StringAppendOperator's delimiter per version
# The rebuild bulk-loads its writes into a vector memtable (appends, sorted once at flush): random
# inserts into Spark's skip list cost 1.7 times as much. The published OPTIONS say what Spark's do.
_BULK_LOAD = {
    "memtable_factory": "{id=VectorRepFactory;count=0;}",
    "allow_concurrent_memtable_write": "false",
}
_AS_SPARK = {"memtable_factory": "SkipListFactory", "allow_concurrent_memtable_write": "true"}
_ZIP_ORDER = ("MANIFEST-", "CURRENT", ".log", "OPTIONS-")


class RebuildError(CheckpointError):
    """The store cannot be rebuilt safely; nothing was published."""


@dataclass(frozen=True)
class RebuildResult:
    operator: int
    partition: int
    store: str
    version: int
    unique_id: str
    path: str  # the published zip
    seconds: float
    keys: int
    internal_keys: int
    records: int
    chain_length: int
    bytes_read: int
    bytes_written: int
    ssts_reused: int
    ssts_written: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def merge_delimiter(conf: dict[str, str]) -> bytes:
    version = conf.get(MERGE_VERSION_CONF)
    if version not in _DELIMITERS:
        raise RebuildError(f"unknown {MERGE_VERSION_CONF}={version!r}: the merge semantics are not known")
    return _DELIMITERS[version]


def _open_options():
    import rocksdict

    # Spark 4.x: block-based table, format_version 5, 4 KiB blocks, 10-bit bloom filter, LZ4.
    opts = rocksdict.Options(raw_mode=True)
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(5)
    table.set_block_size(4096)
    table.set_bloom_filter(10, False)
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_memtable_factory(rocksdict.MemtableFactory.vector())  # _BULK_LOAD
    opts.set_allow_concurrent_memtable_write(False)  # a vector memtable refuses concurrent writes
    opts.create_if_missing(True)
    return opts


def _set_options(folder: Path, values: dict[str, str]) -> None:
    """Sets `name=value` lines in every OPTIONS file of a RocksDB folder."""
    for options in folder.glob("OPTIONS-*"):
        text = options.read_text()
        for name, value in values.items():
            line = re.compile(rf"^(\s*){name}=.*$", re.MULTILINE)
            text = line.sub(lambda m, n=name, v=value: f"{m.group(1)}{n}={v}", text)
        options.write_text(text)


_DELETED = object()
_BATCH_RECORDS = 100_000


def replay(base: dict[bytes, bytes], changelogs: Iterable[list[RecordRun]], delimiter: bytes) -> dict:
    """The store's content after the changelogs, oldest first, in Spark's order: a put replaces, a
    delete removes, a merge appends with StringAppendOperator's semantics (rebuild-notes §3)."""
    state = dict(base)
    for runs in changelogs:
        for run in runs:
            if run.op == "put":
                state.update(zip(run.keys, run.values, strict=True))  # type: ignore[arg-type]
            elif run.op == "delete":
                for key in run.keys:
                    state.pop(key, None)
            else:
                for key, operand in zip(run.keys, run.values, strict=True):  # type: ignore[arg-type]
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
    decided: dict[bytes, object] = {}
    operands: dict[bytes, list[bytes]] = {}  # newest first, for keys not yet decided

    def decide(key: bytes, value: bytes | None) -> None:
        newer = operands.pop(key, None)
        if newer:
            value = delimiter.join(([] if value is None else [value]) + newer[::-1])
        decided[key] = _DELETED if value is None else value

    for runs in reversed(changelogs):
        for run in reversed(runs):
            if run.op != "merge" and operands.keys().isdisjoint(run.keys):
                # the first writer from the end wins: setdefault, newest record first, in C
                values = reversed(run.values) if run.values is not None else repeat(_DELETED)
                deque(map(decided.setdefault, reversed(run.keys), values), maxlen=0)
                continue
            for i in range(len(run.keys) - 1, -1, -1):
                key = run.keys[i]
                if key in decided:
                    continue
                if run.op == "merge":
                    operands.setdefault(key, []).append(run.values[i])  # type: ignore[index]
                else:
                    decide(key, run.values[i] if run.values is not None else None)
    for key in list(operands):  # operands that no put or delete ends merge onto the base
        decide(key, base.get(key))
    content = {k: v for k, v in base.items() if k not in decided}
    content.update((k, v) for k, v in decided.items() if v is not _DELETED)
    return content  # type: ignore[return-value]


def _write_changes(db, base: dict[bytes, bytes], content: dict[bytes, bytes]) -> None:
    """Puts what changed against the base and deletes what is gone: the store ends up holding
    `content`, with one memtable entry per changed key rather than one per record replayed."""
    import rocksdict

    write_opts = rocksdict.WriteOptions()
    write_opts.disable_wal = True  # a property, although the stub shows a method
    get = base.get
    changed = content if not base else {k: v for k, v in content.items() if get(k) != v}
    _write_in_batches(db, write_opts, "put", list(changed), list(changed.values()))
    _write_in_batches(db, write_opts, "delete", list(base.keys() - content.keys()))


def _write_in_batches(db, write_opts, op: str, keys: list[bytes], *values: list[bytes]) -> None:
    """Bounded batches, so a large store is not one giant allocation; the calls are made in C."""
    import rocksdict

    for start in range(0, len(keys), _BATCH_RECORDS):
        batch = rocksdict.WriteBatch(raw_mode=True)  # a written batch is consumed: one per write
        end = start + _BATCH_RECORDS
        deque(map(getattr(batch, op), keys[start:end], *(v[start:end] for v in values)), maxlen=0)
        db.write(batch, write_opts)


def rebuild_store(ckpt: Checkpoint, entry: StoreLineage, workdir: str | None = None) -> RebuildResult:
    """Rebuilds the committed (version, id) of one store as a snapshot zip and publishes it."""
    import rocksdict

    started = time.monotonic()
    if ckpt.format_version != 2 or entry.unique_id is None:
        raise RebuildError("only format V2 stores are compacted", ckpt.url)
    if not entry.loadable:
        raise RebuildError(
            f"{entry.store}: the replay chain of version {entry.version} is incomplete", ckpt.url
        )
    store = ckpt.stores[entry.store]
    if store.file(FileKind.ZIP, entry.version, entry.unique_id) is not None:
        raise RebuildError(f"{entry.store}: version {entry.version} already has its snapshot", ckpt.url)
    folder = entry.committed_file.rel.rsplit("/", 1)[0]  # type: ignore[union-attr]
    conf = ckpt.batches[entry.batch].offset.conf if ckpt.batches[entry.batch].offset else {}
    delimiter = merge_delimiter(conf)
    cf_store = entry.header is not None and entry.header.has_column_families
    if cf_store and entry.base is None:
        raise RebuildError(
            f"{entry.store}: a column-family store needs a base zip for its family mapping", ckpt.url
        )

    tmp = Path(tempfile.mkdtemp(prefix="ckpt-rebuild-", dir=workdir))
    try:
        db_dir, bytes_read = tmp / "db", 0
        db_dir.mkdir()
        base_meta: SnapshotMetadata | None = None
        if entry.base is not None:
            bytes_read, base_meta = _unpack_base(ckpt, entry, folder, db_dir, delimiter)
        db = rocksdict.Rdict(str(db_dir), options=_open_options())
        try:
            base = dict(db.items())
            changelogs = []
            for f in entry.chain:
                data = ckpt.read_verified(f.rel)
                bytes_read += len(data)
                changelogs.append(ckpt.read_changelog_runs(f, data)[1])
            records = sum(len(run.keys) for runs in changelogs for run in runs)
            _write_changes(db, base, replay(base, changelogs, delimiter))
            with ThreadPoolExecutor(1) as pool:
                # RocksDB's flush releases the GIL: the check's replay runs meanwhile
                check = pool.submit(replay_newest_first, base, changelogs, delimiter)
                db.flush()
                checkpoint_dir = tmp / "checkpoint"
                rocksdict.Checkpoint(db).create_checkpoint(str(checkpoint_dir))
                expected = check.result()
        finally:
            db.close()
        _set_options(checkpoint_dir, _AS_SPARK)
        # What gets published is what RocksDB reads back from the checkpoint's files, compared
        # with the chain replayed the other way round.
        rebuilt = rocksdict.Rdict(
            str(checkpoint_dir),
            options=rocksdict.Options(raw_mode=True),
            access_type=rocksdict.AccessType.read_only(False),
        )
        try:
            content = dict(rebuilt.items())
        finally:
            rebuilt.close()
        if content != expected:
            differ = sum(1 for k in content.keys() | expected.keys() if content.get(k) != expected.get(k))
            raise RebuildError(
                f"{entry.store}: the rebuilt store differs from an independent replay in {differ} keys",
                ckpt.url,
            )
        keys, internal = _count_keys(content, base_meta)
        result = _publish(ckpt, entry, folder, checkpoint_dir, base_meta, keys, internal)
        sid = entry.store
        return RebuildResult(
            operator=sid.operator, partition=sid.partition, store=sid.store, version=entry.version,
            unique_id=entry.unique_id, path=ckpt.storage.full(result["zip"]),
            seconds=round(time.monotonic() - started, 3), keys=keys, internal_keys=internal,
            records=records, chain_length=len(entry.chain), bytes_read=bytes_read,
            bytes_written=result["bytes"], ssts_reused=result["reused"], ssts_written=result["written"],
        )  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack_base(
    ckpt: Checkpoint, entry: StoreLineage, folder: str, db_dir: Path, delimiter: bytes
) -> tuple[int, SnapshotMetadata]:
    """The base zip's RocksDB files and SSTs in `db_dir`: (bytes read, the zip's metadata)."""
    rel = entry.base.rel  # type: ignore[union-attr]
    data = ckpt.read_verified(rel)
    read = len(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        meta = parse_zip_metadata(zf.read("metadata"), ckpt.storage.full(rel))
        for name in zf.namelist():
            if "/" in name or name.startswith("."):
                raise RebuildError(f"unexpected entry {name!r} in {rel}", ckpt.url)
            if name != "metadata":
                (db_dir / name).write_bytes(zf.read(name))
    for sst in meta.sst_files:
        blob = ckpt.storage.read_bytes(f"{folder}/SSTs/{sst.dfs_name}")
        if len(blob) != sst.size:
            raise RebuildError(f"SST {sst.dfs_name} has {len(blob)} bytes, the zip lists {sst.size}")
        (db_dir / sst.local_name).write_bytes(blob)
        read += len(blob)
    # rebuild-notes §1: RocksDB reads the merge operator from the newest OPTIONS file, and Spark's says
    # StringAppendOperator without a delimiter, which means "," - not what mergeOperatorVersion 2 uses.
    merge = f"{{id=StringAppendOperator;delimiter={delimiter.decode()};}}"
    _set_options(db_dir, {"merge_operator": merge, **_BULK_LOAD})
    return read, meta


def _count_keys(content: dict[bytes, bytes], base_meta: SnapshotMetadata | None) -> tuple[int, int]:
    """(numKeys, numInternalKeys): column-family stores count by the family id's type."""
    mapping = base_meta.column_family_mapping if base_meta else {}
    if not mapping:
        return len(content), 0
    types = base_meta.column_family_type_map  # type: ignore[union-attr]
    internal_ids = {cf_id for name, cf_id in mapping.items() if types.get(name)}
    known = set(mapping.values())
    internal = 0
    for key in content:
        cf = int.from_bytes(key[:2], "little")
        if cf not in known:
            raise RebuildError(f"key with unknown column family id {cf}")
        internal += cf in internal_ids
    return len(content) - internal, internal


def _publish(
    ckpt, entry, folder, checkpoint_dir: Path, base_meta: SnapshotMetadata | None, keys: int, internal: int
) -> dict:
    storage = ckpt.storage
    base_ssts = {s.local_name: s for s in base_meta.sst_files} if base_meta else {}
    listed, reused, written, bytes_written = [], 0, 0, 0
    for sst in sorted(checkpoint_dir.glob("*.sst")):
        size = sst.stat().st_size
        known = base_ssts.get(sst.name)
        if known is not None and known.size == size:
            listed.append(
                {"localFileName": known.local_name, "dfsSstFileName": known.dfs_name, "sizeBytes": size}
            )
            reused += 1
            continue
        dfs = f"{sst.stem}-{uuid.uuid4()}.sst"  # a new name: never overwrites, shared SSTs stay intact
        storage.put_file(str(sst), f"{folder}/SSTs/{dfs}")
        listed.append({"localFileName": sst.name, "dfsSstFileName": dfs, "sizeBytes": size})
        written += 1
        bytes_written += size
    # The zip is written only once every SST it lists exists with its size: a stat of each (a
    # HEAD on S3), never a listing of the folder, which holds every snapshot's SSTs.
    for sst in listed:
        name = sst["dfsSstFileName"]
        found = storage.stat(f"{folder}/SSTs/{name}")
        size = None if found is None else found.size
        if size != int(sst["sizeBytes"]):
            raise RebuildError(f"SST {name} landed with {size} bytes, not {sst['sizeBytes']}")
    meta = {
        "sstFiles": listed,
        "numKeys": keys,
        "numInternalKeys": internal,
        "columnFamilyMapping": base_meta.column_family_mapping if base_meta else {},
        "columnFamilyTypeMap": base_meta.column_family_type_map if base_meta else {},
        "maxColumnFamilyId": base_meta.max_column_family_id if base_meta else 0,
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for prefix in _ZIP_ORDER:  # rocksdict-config.json stays out (rebuild-notes §4)
            for p in sorted(checkpoint_dir.iterdir()):
                if p.name.startswith(prefix) or (prefix == ".log" and p.name.endswith(".log")):
                    zf.write(p, p.name)
        zf.writestr("metadata", "v1\n" + json.dumps(meta, separators=(",", ":")))
    data = buf.getvalue()
    if os.environ.get(KILL_BEFORE_ZIP_ENV):  # fault injection for crash tests: SSTs are out, the zip is not
        os.kill(os.getpid(), signal.SIGKILL)
    name = f"{entry.version}_{entry.unique_id}.zip"
    _publish_no_clobber(ckpt, f"{folder}/{name}", data)
    sidecar = {"algorithm": "CRC32C", "value": crc32c_signed(data), "mainFileSize": len(data),
               "timestampMs": int(time.time() * 1000), "creator": {"tool": "ckpt-maint"}}  # fmt: skip
    _publish_no_clobber(ckpt, f"{folder}/{name}.crc", json.dumps(sidecar).encode())
    return {
        "zip": f"{folder}/{name}",
        "bytes": bytes_written + len(data),
        "reused": reused,
        "written": written,
    }


def _publish_no_clobber(ckpt: Checkpoint, rel: str, data: bytes) -> None:
    """Atomic and never overwriting (Storage.write_if_absent): a crash leaves at most our temp file."""
    try:
        ckpt.storage.write_if_absent(rel, data, MAINT_TEMP_PREFIX)
    except FileExistsError as exc:
        raise RebuildError(f"{rel} already exists: never overwritten", ckpt.url) from exc
