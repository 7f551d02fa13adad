"""A store's base zip and its SSTs brought to local disk, each file checked against every checksum
it has (Spark's sidecar, the size the zip lists, Hadoop's hidden `.crc`), with room on the disk
checked first: what compaction's rebuild and migration's writer start from."""

from __future__ import annotations

import shutil
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from checkpoint.errors import RebuildError
from checkpoint.format import (
    SnapshotMetadata,
    parse_zip_metadata,
    read_metadata_entry,
    zip_damage_as,
)
from checkpoint.model import (
    Checkpoint,
    CheckpointFile,
    check_free_disk,
    check_hadoop_checksum,
    download_checked,
)
from checkpoint.policy import Policy
from checkpoint.storage import carrying_watch


@dataclass(frozen=True)
class FetchedBase:
    meta: SnapshotMetadata
    ssts: dict[str, int]  # local name -> CRC32C of the bytes copied, each checked against the zip's size
    bytes_read: int


def fetch_base(
    ckpt: Checkpoint, base: CheckpointFile, folder: str, tmp: Path, policy: Policy, chain_bytes: int
) -> FetchedBase:
    """The base zip's RocksDB files and SSTs in `tmp/db`, streamed to disk in chunks: the zip checked
    against its checksums, each SST against the size the zip lists and Hadoop's checksum."""
    rel = base.rel
    db_dir, local_zip = tmp / "db", tmp / "base.zip"
    read = download_checked(ckpt, rel, str(local_zip), base.info.size, policy)
    # A damaged zip is the base's fault; the local disk's errors (full, unwritable) pass as they are.
    damaged = zip_damage_as(lambda exc: RebuildError(f"unreadable base zip: {exc}", ckpt.storage.full(rel)))
    try:
        with damaged, zipfile.ZipFile(local_zip) as zf:
            meta = parse_zip_metadata(read_metadata_entry(zf, ckpt.storage.full(rel)), ckpt.storage.full(rel))
            check_free_disk(tmp, read + sum(s.size for s in meta.sst_files), chain_bytes, ckpt.url)
            for info in zf.infolist():
                name = info.filename
                if "/" in name or name.startswith("."):
                    raise RebuildError(f"unexpected entry {name!r} in {rel}", ckpt.url)
                if name != "metadata":
                    with zf.open(info) as src, open(db_dir / name, "wb") as out:
                        shutil.copyfileobj(src, out, policy.copy_chunk_bytes)
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
        ssts = dict(pool.map(carrying_watch(fetch), meta.sst_files))  # a look's (`ckpt fleet --expired`)
    return FetchedBase(meta, ssts, read + sum(s.size for s in meta.sst_files))
