"""Synthetic checkpoints with a real store's naming, for scale only (benchmarks, request counts).

V2 changelogs with lineage headers and zips with ids, a lost attempt every other version, SSTs
shared between snapshots, Spark `.crc` sidecars (right for the committed files) and Hadoop hidden
crcs, and `window` batches in the commit and offset logs. Changelogs hold no records: only the
headers that lineage reads are real. Correctness is proved on the corpus of real checkpoints; these
only make a checkpoint big.

Two checkpoints built with the same partitions and `versions` equal modulo `snapshot_every` hold
the same replay chains at the latest batch and differ only in older history.
"""

from __future__ import annotations

import errno
import io
import json
import os
import time
import uuid
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from checkpoint.format import HDFS_PROVIDER, PROVIDER_CONF
from testbed.lz4java import frame, java_utf

# What a cache of synthetic checkpoints is keyed by: 2 added the file source's log entry that the
# offsets name (validation finds a missing one, as Spark's restart does).
VERSION = 2
WINDOW = 100  # committed batches still in the commit log (Spark's default minBatchesToRetain)
SNAPSHOT_EVERY = 10
# Every batch's offsets name the file source's log entry 0 (one batch of input, as a query whose
# later batches found no new file), which the source log holds.
_OFFSET_LINE = '{"logOffset":0}'
_SOURCE_LOG = ("sources/0/0", b'v1\n{"path":"file:///synthetic/input/part-0","timestamp":0,"batchId":0}')
OLD = time.time() - 30 * 86400


def uid(*parts: int) -> str:
    return str(uuid.UUID(int=hash(parts) & ((1 << 122) - 1) | (4 << 76)))


def _changelog(lineage: list[tuple[int, str]]) -> bytes:
    text = json.dumps([{"version": v, "checkpointUniqueId": u} for v, u in lineage], separators=(",", ":"))
    return frame(java_utf("v3") + java_utf(text) + b"\xff\xff\xff\xff")


def _sidecar(data: bytes) -> bytes:
    """Spark's `.crc` of a file (docs/format.md §6), right for its bytes."""
    from checkpoint.format import crc32c_signed

    return json.dumps(
        {"algorithm": "CRC32C", "value": crc32c_signed(data), "mainFileSize": len(data)}
    ).encode()


def _zip(ssts: list[tuple[str, int]]) -> bytes:
    listed = [{"localFileName": n[:6] + ".sst", "dfsSstFileName": n, "sizeBytes": s} for n, s in ssts]
    meta = {"sstFiles": listed, "numKeys": 1, "numInternalKeys": 0, "columnFamilyMapping": {},
            "columnFamilyTypeMap": {}, "maxColumnFamilyId": 0}  # fmt: skip
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("CURRENT", b"MANIFEST-000005\n")
        zf.writestr("metadata", ("v1\n" + json.dumps(meta)).encode())
    return buf.getvalue()


def iter_files(
    partitions: int,
    versions: int,
    window: int = WINDOW,
    snapshot_every: int = SNAPSHOT_EVERY,
    committed_partitions: int | None = None,
) -> Iterator[tuple[str, bytes]]:
    """(relative path, content) of each file of one checkpoint with `versions` versions of state
    per store, one at a time: a checkpoint of 10M files is written without holding it.
    `committed_partitions` (default: all) is how many partitions the commit log names; the folders
    of the others hold history only, as after a repartition to fewer partitions."""
    committed = partitions if committed_partitions is None else committed_partitions
    yield "metadata", b'{"id":"synthetic"}'
    first = versions - window
    offset = f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{{}}}}\n{_OFFSET_LINE}'.encode()
    yield _SOURCE_LOG
    for batch in range(first, versions):
        ids = [[uid(p, batch + 1)] for p in range(committed)]
        yield f"offsets/{batch}", offset
        yield f"commits/{batch}", ("v2\n" + json.dumps({"nextBatchWatermarkMs": 0,
                                   "stateUniqueIds": {"0": ids}})).encode()  # fmt: skip
    yield "state/0/_metadata/metadata", _operator_metadata(committed)
    empty = b""
    newest_zip = versions - versions % snapshot_every  # 0: none, every version replayed from 1
    for p in range(partitions):
        d = f"state/0/{p}"
        last_zip = 0
        for v in range(1, versions + 1):
            u = uid(p, v)
            lineage = [(x, uid(p, x)) for x in range(max(1, last_zip), v)]
            # Real bytes where the window's lineages read them and where the newest replay chain
            # does: Spark writes no changelog empty, and validation takes an empty one in a chain for
            # damage. Older history stays empty, so a checkpoint of 10^7 files stays small.
            changelog = _changelog(lineage) if v > first or v > newest_zip else empty
            yield f"{d}/{v}_{u}.changelog", changelog
            yield f"{d}/{v}_{u}.changelog.crc", _sidecar(changelog)
            for name in (f".{v}_{u}.changelog.crc", f".{v}_{u}.changelog.crc.crc"):
                yield f"{d}/{name}", empty
            if v % 2 == 0:  # a lost attempt every other version
                a = uid(p, v, 1)
                for name in (f"{v}_{a}.changelog", f"{v}_{a}.changelog.crc", f".{v}_{a}.changelog.crc",
                             f".{v}_{a}.changelog.crc.crc"):  # fmt: skip
                    yield f"{d}/{name}", empty
            if v % snapshot_every == 0:
                ssts = [(f"{v:06d}-{uid(p, v, 9)}.sst", 1), (f"{v + 1:06d}-{uid(p, v, 8)}.sst", 1)]
                if last_zip:  # shares the previous snapshot's first SST, as RocksDB does
                    ssts.append((f"{last_zip:06d}-{uid(p, last_zip, 9)}.sst", 1))
                snapshot = _zip(ssts)
                yield f"{d}/{v}_{u}.zip", snapshot
                yield f"{d}/{v}_{u}.zip.crc", _sidecar(snapshot)
                for name, _ in ssts[:2]:
                    yield f"{d}/SSTs/{name}", b"x"
                    yield f"{d}/SSTs/.{name}.crc", empty
                last_zip = v


def iter_hdfs_files(
    partitions: int,
    versions: int,
    window: int = WINDOW,
    snapshot_every: int = SNAPSHOT_EVERY,
    committed_partitions: int | None = None,
) -> Iterator[tuple[str, bytes]]:
    """As `iter_files`, with Spark's defaults: format V1 and the HDFS-backed store (a `<v>.delta`
    per version, a `<v>.snapshot` every `snapshot_every`, each with Hadoop's hidden crc). Deltas
    and snapshots hold no records: cleanup planning reads none of them."""
    committed = partitions if committed_partitions is None else committed_partitions
    yield "metadata", b'{"id":"synthetic"}'
    conf = json.dumps({PROVIDER_CONF: HDFS_PROVIDER})
    offset = f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{conf}}}\n{_OFFSET_LINE}'.encode()
    yield _SOURCE_LOG
    for batch in range(versions - window, versions):
        yield f"offsets/{batch}", offset
        yield f"commits/{batch}", b'v1\n{"nextBatchWatermarkMs":0}'
    yield "state/0/_metadata/metadata", _operator_metadata(committed)
    empty = b""
    for p in range(partitions):
        for v in range(1, versions + 1):
            kinds = ("delta", "snapshot") if v % snapshot_every == 0 else ("delta",)
            for kind in kinds:
                yield f"state/0/{p}/{v}.{kind}", empty
                yield f"state/0/{p}/.{v}.{kind}.crc", empty


def _operator_metadata(partitions: int) -> bytes:
    return (
        'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
        f'"stateStoreInfo":[{{"storeName":"default","numColsPrefixKey":0,"numPartitions":{partitions}}}]}}'
    ).encode()


def files(partitions: int, versions: int, **shape: int) -> dict[str, bytes]:
    """Relative path -> content of one checkpoint (see iter_files), held whole: small ones only."""
    return dict(iter_files(partitions, versions, **shape))


def write_local(
    root: Path,
    content: dict[str, bytes] | Iterable[tuple[str, bytes]],
    mtime: float = OLD,
    *,
    link_same: bool = False,
) -> int:
    """Writes the files under `root`, dated `mtime`; returns how many. `link_same`: a file whose
    bytes an earlier one had is a hard link to it (a checkpoint of 10^7 files in the inodes of its
    distinct contents, a few hundred thousand), as many links an inode as the disk allows."""
    made: set[Path] = set()
    first: dict[bytes, tuple[Path, int]] = {}  # content -> the file it is linked to, and its links
    n = 0
    for rel, data in content.items() if isinstance(content, dict) else content:
        path = root / rel
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        n += 1
        if link_same and (seen := first.get(data)) is not None and seen[1] < _LINKS_AN_INODE:
            try:
                os.link(seen[0], path)
                first[data] = (seen[0], seen[1] + 1)
                continue
            except OSError as exc:  # the disk's own limit of links, lower than ours
                if exc.errno != errno.EMLINK:
                    raise
        path.write_bytes(data)
        os.utime(path, (mtime, mtime))
        if link_same:
            first[data] = (path, 1)
    return n


_LINKS_AN_INODE = 60_000  # ext4 allows 65,000


def upload(fs, prefix: str, content: Iterable[tuple[str, bytes]]) -> int:
    """Puts the files under `prefix` of an fsspec filesystem (an object store), 1,000 a request
    batch, never holding more; returns how many."""
    n, batch = 0, {}
    for rel, data in content:
        batch[f"{prefix}/{rel}"] = data
        if len(batch) == 1000:
            fs.pipe(batch)
            n, batch = n + len(batch), {}
    fs.pipe(batch)
    return n + len(batch)


def build(
    root: Path, partitions: int, versions: int, *, hdfs: bool = False, link_same: bool = False, **shape: int
) -> int:
    """Writes one synthetic checkpoint to local disk (format V2 on RocksDB, or with `hdfs`
    Spark's defaults); returns its file count. `link_same`: see `write_local`."""
    files = (iter_hdfs_files if hdfs else iter_files)(partitions, versions, **shape)
    return write_local(root, files, link_same=link_same)
