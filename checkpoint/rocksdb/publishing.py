"""Publishing a rebuilt snapshot: the SSTs first, each durable, then the zip under its committed
name with a no-clobber write, then its `.crc` sidecar; every name checked free first."""

from __future__ import annotations

import io
import json
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from checkpoint.crash import crash_point
from checkpoint.errors import CheckpointError, RebuildError
from checkpoint.format import (
    MAINT_TEMP_PREFIX,
    ROCKSDB_FILES,
    WRITTEN_ZIP_METADATA_VERSION,
    FileKind,
    SnapshotMetadata,
    crc32c_signed,
)
from checkpoint.model import Checkpoint, StoreLineage
from checkpoint.storage import Storage

_ZIP_ORDER = ("MANIFEST-", "CURRENT", ".log", "OPTIONS-")


@dataclass(frozen=True)
class ZipTarget:
    """Where a snapshot zip goes: a store folder of a checkpoint, under `<version>[_<id>].zip`, with
    Spark's `.crc` sidecar where the format writes one (V2)."""

    storage: Storage
    folder: str
    version: int
    unique_id: str | None
    sidecar: bool

    @staticmethod
    def of(ckpt: Checkpoint, entry: StoreLineage, folder: str) -> ZipTarget:
        """The committed version of `entry`'s store in its own checkpoint (compaction)."""
        sidecar = ckpt.states.sidecar_of(ROCKSDB_FILES.name(FileKind.ZIP, entry.version, entry.unique_id))
        return ZipTarget(ckpt.storage, folder, entry.version, entry.unique_id, sidecar is not None)

    @property
    def name(self) -> str:
        return ROCKSDB_FILES.name(FileKind.ZIP, self.version, self.unique_id)


def publish(
    target: ZipTarget, checkpoint_dir: Path, base_meta: SnapshotMetadata | None, keys: int, internal: int
) -> dict:
    storage, folder = target.storage, target.folder
    _refuse_taken_names(target)  # before the first byte is written
    base_ssts = {s.local_name: s for s in base_meta.sst_files} if base_meta else {}
    listed: list[dict[str, Any]] = []
    reused, written, bytes_written = 0, 0, 0
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
    for row in listed:
        name = row["dfsSstFileName"]
        found = storage.stat(f"{folder}/SSTs/{name}")
        landed = None if found is None else found.size
        if landed != int(row["sizeBytes"]):
            raise RebuildError(f"SST {name} landed with {landed} bytes, not {row['sizeBytes']}")
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
        for prefix in _ZIP_ORDER:  # rocksdict-config.json stays out (docs/compaction.md, rebuild note 4)
            for p in sorted(checkpoint_dir.iterdir()):
                if p.name.startswith(prefix) or (prefix == ".log" and p.name.endswith(".log")):
                    zf.write(p, p.name)
        body = json.dumps(meta, separators=(",", ":"))
        zf.writestr("metadata", f"v{WRITTEN_ZIP_METADATA_VERSION}\n{body}")
    data = buf.getvalue()
    crash_point("compaction.before_zip")  # SSTs are out, the zip is not
    name = target.name
    _publish_no_clobber(storage, f"{folder}/{name}", data)
    if target.sidecar:  # Spark writes `.crc` sidecars in format V2 only
        crash_point("compaction.before_sidecar")  # the zip is out, its sidecar not (Spark reads it so)
        sidecar = {"algorithm": "CRC32C", "value": crc32c_signed(data), "mainFileSize": len(data),
                   "timestampMs": int(time.time() * 1000), "creator": {"tool": "ckpt-maint"}}  # fmt: skip
        try:
            _publish_no_clobber(storage, f"{folder}/{name}.crc", json.dumps(sidecar).encode())
        except (CheckpointError, OSError) as exc:
            _withdraw(storage, f"{folder}/{name}", exc)
    return {
        "zip": f"{folder}/{name}",
        "bytes": bytes_written + len(data),
        "reused": reused,
        "written": written,
    }


def _refuse_taken_names(target: ZipTarget) -> None:
    """The zip's name and its sidecars' must all be free. A leftover `<v>_<u>.zip.crc` would sit
    beside the new zip without matching it, and Spark prefers that zip to the replay chain: the
    store would no longer load. On a local disk so would Hadoop's hidden `.<v>_<u>.zip.crc`, which
    its local file system checks on every read (seen: a ChecksumException at the restart, when a
    zip Spark had uploaded was gone and its checksum file not), and `.<v>_<u>.zip.crc.crc`, its
    checksum of Spark's sidecar (seen: Spark's FileSystem-based checkpoint manager refused the new
    sidecar). Two stats (HEADs on S3), four on a local disk, whatever the folder holds."""
    storage, zip_name = target.storage, target.name
    for name in (zip_name, f"{zip_name}.crc", *storage.sidecars(zip_name)):
        where = f"{target.folder}/{name}"
        if storage.stat(where) is not None:
            raise RebuildError(f"{target.folder}: {name} already exists, so no snapshot is published for it "
                               "(a leftover of an earlier attempt? remove it if nothing names it)",
                               storage.full(where))  # fmt: skip


def _withdraw(storage: Storage, rel: str, why: BaseException) -> NoReturn:
    """A zip whose sidecar could not be published (a full disk) is half a publish: deleted, so the
    store is as it was, and the store fails with both reasons."""
    left = storage.delete_batch([rel])
    fate = (f"the zip could not be withdrawn ({next(iter(left.values()))}): delete it" if left
            else "the zip was withdrawn")  # fmt: skip
    raise RebuildError(f"its .crc sidecar was not published ({why}); {fate}", storage.full(rel)) from why


def _publish_no_clobber(storage: Storage, rel: str, data: bytes) -> None:
    """Atomic and never overwriting (Storage.write_if_absent): a crash leaves at most our temp file."""
    try:
        storage.write_if_absent(rel, data, MAINT_TEMP_PREFIX)
    except FileExistsError as exc:
        raise RebuildError(f"{rel} already exists: never overwritten", storage.full(rel)) from exc
