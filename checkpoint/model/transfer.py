"""A checkpoint's files copied to local disk for a rewrite, checked against every checksum they
have, and the room on the disk checked before: what compaction and migration copy state with."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from checkpoint.errors import RebuildError
from checkpoint.format import check_hadoop_crc, hadoop_crc_bytes
from checkpoint.model.checkpoint import Checkpoint
from checkpoint.policy import Policy

# What a rebuild keeps free beyond its estimate: the memtables it may be flushing (two of the
# store's and two of each other store's) and RocksDB's own reserve. RocksDB that meets a full disk
# retries its flush forever, and a rebuild waiting on it would hold its lease as long.
DISK_MARGIN = 128 << 20


def check_free_disk(tmp: Path, base_bytes: int, chain_bytes: int, url: str) -> None:
    """The base is on disk twice at most (downloaded, then the new SSTs beside it), and the chain
    five times: replayed into the store and into its check, as SSTs of up to 1.6 times the
    changelogs' bytes each (a delta-only chain of 5 x 10^6 records), and its keys into a third."""
    need = 2 * base_bytes + 5 * chain_bytes + DISK_MARGIN
    free = shutil.disk_usage(tmp).free
    if free < need:
        raise RebuildError(
            f"not enough free disk in {tmp.parent} for this store: about {need:,} bytes needed (base x 2 + "
            f"chain x 5 + 128 MiB), {free:,} free; point TMPDIR at a larger disk",
            url,
        )


def check_disk_left(tmp: Path, url: str | None = None) -> None:
    """Between two writes of a rebuild: refused before RocksDB meets a full disk."""
    free = shutil.disk_usage(tmp).free
    if free < DISK_MARGIN:
        raise RebuildError(
            f"the disk of {tmp.parent} filled during the rebuild ({free:,} bytes left, under "
            f"{DISK_MARGIN >> 20} MiB): nothing was published; point TMPDIR at a larger disk",
            url,
        )


def check_hadoop_checksum(ckpt: Checkpoint, rel: str, local: str) -> None:
    """A local copy of `rel` against Hadoop's hidden `.<name>.crc`, where the storage keeps
    them (a local disk) and one was written. Spark's providers read state files without it
    (seen: a delta with a byte changed in its LZ4 end mark loads), so a copy that this tool
    writes from is checked here. Raises CorruptFileError."""
    folder, _, name = rel.rpartition("/")
    kept = ckpt.storage.sidecars(name)
    if not kept:
        return
    hidden = f"{folder}/{kept[0]}" if folder else kept[0]
    bound = hadoop_crc_bytes(os.path.getsize(local))
    if (crc := ckpt.storage.read_if_exists(hidden, limit=bound)) is not None:
        with open(local, "rb") as fh:
            check_hadoop_crc(fh.read, crc, ckpt.storage.full(rel))


def download_checked(ckpt: Checkpoint, rel: str, local: str, size: int | None, policy: Policy) -> int:
    """A state file copied to local disk in chunks and checked against every checksum it has:
    Spark's `.crc` sidecar (format V2) and Hadoop's hidden one (a local disk). Returns the bytes;
    `size`, when known, spares a HEAD on object stores."""
    read = ckpt.download_verified(rel, local, size or None, policy.copy_chunk_bytes)
    check_hadoop_checksum(ckpt, rel, local)
    return read
