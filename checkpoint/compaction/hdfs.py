"""Materialising `<v>.snapshot` for the HDFS-backed store, by Spark's own provider.

Spark writes this snapshot only in a running query's maintenance, from the map of the version the
query last loaded: a query that stops, or whose maintenance falls behind, keeps its whole chain
of deltas. Spark's provider can do it offline (load the version, run its maintenance), so this
module calls it through a `SnapshotEngine` rather than writing Spark's map format itself.

What it adds is the guards. The provider never runs over the checkpoint: its maintenance lists
the folder it runs in, snapshots whatever version is newest there, deletes old files by its own
retention and writes with overwrite. It runs over a private copy of exactly the chain recovery
reads (the base snapshot and the deltas after it), so the newest version there is the committed
one, and nothing of the checkpoint can be changed by it. The snapshot it writes is then checked
twice before anyone may read it, by Spark's recovery (a fresh provider, with the chain removed
from the copy, loads it alone and must hold as many rows as the chain gave) and by this project's
decoder (the codec's block checksums, the record framing, and the same count), and published
under its name without ever overwriting.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from checkpoint.compaction.rebuild import RebuildResult, peak_rss, reset_peak_rss
from checkpoint.errors import RebuildError
from checkpoint.format import (
    HDFS_FILES,
    MAINT_TEMP_PREFIX,
    FileKind,
    StateAction,
    check_state_file,
    measure_state_file,
)
from checkpoint.model import Checkpoint, StoreId, StoreLineage, check_free_disk, download_checked
from checkpoint.policy import POLICY, Policy


class SnapshotEngine(Protocol):
    """Spark's HDFS-backed provider over a local folder laid out as a checkpoint's `state/`
    (`jobs.compact.SparkSnapshotEngine`). `conf`: the SQL confs pinned in the checkpoint's offset
    file, as a restart applies them."""

    def snapshot(self, state_root: str, store: StoreId, version: int, conf: Mapping[str, str]) -> int:
        """Loads `version` of `store` as recovery does and runs the provider's maintenance, which
        writes `<version>.snapshot` when that is the newest version there; the rows loaded."""
        ...

    def load(self, state_root: str, store: StoreId, version: int, conf: Mapping[str, str]) -> int:
        """The rows a fresh provider loads for `version`, as recovery does."""
        ...

    def free_heap(self) -> int | None:
        """Bytes the JVM the provider runs in can still take (its max heap less what is used);
        None where that cannot be told."""
        ...


# What the provider's map costs on a JVM heap (64-bit, compressed oops): per entry the map's node,
# two UnsafeRow objects and their byte arrays' headers, and the keys' and values' bytes padded to
# 8. Fitted on Spark 4.3's provider, heap measured after a full GC: 2M entries of 16 bytes took
# 357.7 MiB (this says 368), 700k of 1,008 bytes took 830.3 MiB (this says 837); docs/compaction.md.
HDFS_ENTRY_OVERHEAD = 176
HDFS_BYTES_FACTOR = 1.07


def map_bytes(measured: list[tuple[int, int]]) -> int:
    """What the provider's map of a chain takes at most, from each file's (records, decoded
    bytes): a record is framed by two 4-byte lengths; deltas that overwrite a key count twice, so
    it is an upper bound."""
    return sum(
        int((decoded - 8 * records) * HDFS_BYTES_FACTOR) + HDFS_ENTRY_OVERHEAD * records
        for records, decoded in measured
    )


def refuse_beyond_heap(sid: StoreId, needed: int, free: int | None, policy: Policy, url: str) -> None:
    if free is None or needed <= free * policy.hdfs_heap_share:
        return
    mib = 1 << 20
    at_least = int(needed / policy.hdfs_heap_share) // mib + 512  # and what Spark itself holds
    raise RebuildError(
        f"{sid}: Spark's provider would hold this store's map on the driver's heap, about {needed // mib:,} "
        f"MiB, and {free // mib:,} MiB of it is free: raise spark.driver.memory to at least {at_least}m "
        "(`ckpt compact --driver-memory`, or the Dagster Spark resource's conf); nothing was written, and "
        "the other stores go on",
        url,
    )


def taken_names(ckpt: Checkpoint, folder: str, version: int) -> list[str]:
    """The snapshot's name and its sidecars' that exist already. A leftover Hadoop `.crc` beside
    a new snapshot, or beside its Spark `.crc`, fails every read of it on a local disk (a
    ChecksumException)."""
    name = HDFS_FILES.name(FileKind.SNAPSHOT, version)
    names = (name, f"{name}.crc", *ckpt.storage.sidecars(name))
    return [n for n in names if ckpt.storage.stat(f"{folder}/{n}") is not None]


def materialize_snapshot(
    ckpt: Checkpoint,
    entry: StoreLineage,
    engine: SnapshotEngine,
    workdir: str | None = None,
    policy: Policy = POLICY,
) -> RebuildResult:
    """Writes the committed version of one HDFS-backed store as `<v>.snapshot`, by Spark's
    provider over a private copy of its chain, checked and then published."""
    started = time.monotonic()
    reset_peak_rss()
    sid, version = entry.store, entry.version
    ckpt.states.refuse(StateAction.PROVIDER_SNAPSHOT, ckpt.url, str(sid))
    if not entry.loadable or entry.committed_file is None:
        raise RebuildError(f"{sid}: the replay chain of version {version} is incomplete", ckpt.url)
    folder = entry.committed_file.rel.rsplit("/", 1)[0]
    if taken := taken_names(ckpt, folder, version):
        raise RebuildError(f"{sid}: {', '.join(taken)} already exist(s), so no snapshot is published for "
                           f"version {version} (a leftover of an earlier attempt? remove it if nothing "
                           "reads it)", ckpt.storage.full(folder))  # fmt: skip
    offset = ckpt.batches[entry.batch].offset
    conf = dict(offset.conf) if offset else {}
    sources = ([entry.base] if entry.base else []) + list(entry.chain)
    read = sum(f.info.size for f in sources)
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-snapshot-", dir=workdir))
    try:
        # The chain's copy, and beside it a snapshot of about the same size.
        check_free_disk(tmp, read, read, ckpt.url)
        local = tmp / folder
        local.mkdir(parents=True)
        measured = []
        for f in sources:
            name = f.rel.rsplit("/", 1)[-1]
            download_checked(ckpt, f.rel, str(local / name), f.info.size, policy)
            with open(local / name, "rb") as fh:
                snapshot = f.kind.is_base
                measured.append(measure_state_file(fh.read, ckpt.changelog_codec, f.rel, snapshot=snapshot))
        # Before the load: a map larger than the heap would exhaust the JVM every store shares.
        refuse_beyond_heap(sid, map_bytes(measured), engine.free_heap(), policy, ckpt.url)
        keys = engine.snapshot(str(tmp / "state"), sid, version, conf)
        written = local / HDFS_FILES.name(FileKind.SNAPSHOT, version)
        if not written.exists():
            raise RebuildError(f"{sid}: Spark's maintenance wrote no snapshot of version {version} "
                               "(its log says why)", ckpt.url)  # fmt: skip
        for f in sources:  # the snapshot alone is left for the second load to find
            (local / f.rel.rsplit("/", 1)[-1]).unlink()
        with ThreadPoolExecutor(1) as pool, open(written, "rb") as fh:
            # The decode runs while the JVM loads (a Py4J call waits without the GIL).
            decoding = pool.submit(
                check_state_file, fh.read, ckpt.changelog_codec, str(written), snapshot=True
            )
            reread = engine.load(str(tmp / "state"), sid, version, conf)
            decoded = decoding.result()
        if not keys == reread == decoded:
            raise RebuildError(f"{sid}: the snapshot does not hold the store: Spark loaded {keys:,} rows "
                               f"from the chain, {reread:,} from the snapshot alone, which decodes to "
                               f"{decoded:,} records", ckpt.url)  # fmt: skip
        rel = f"{folder}/{written.name}"
        size = written.stat().st_size
        try:
            ckpt.storage.put_new(str(written), rel, MAINT_TEMP_PREFIX)
        except FileExistsError as exc:
            raise RebuildError(f"{rel} appeared meanwhile: never overwritten", ckpt.url) from exc
        landed = ckpt.storage.stat(rel)
        if landed is None or landed.size != size:
            raise RebuildError(f"{rel} landed with {landed and landed.size} bytes, not {size}", ckpt.url)
        return RebuildResult(
            operator=sid.operator, partition=sid.partition, store=sid.store, version=version,
            unique_id=None, path=ckpt.storage.full(rel), seconds=round(time.monotonic() - started, 3),
            keys=keys, internal_keys=0, records=None, chain_length=len(entry.chain),
            bytes_read=read, bytes_written=size, ssts_reused=0, ssts_written=0, touched_keys=None,
            memtable_bytes=0, block_cache_bytes=0, peak_rss_bytes=peak_rss(),
        )  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
