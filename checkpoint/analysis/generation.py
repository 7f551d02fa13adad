"""Which Spark generation wrote a format V2 store, told from the store's own files, so that this
release writes only what the checkpoint's own Spark reads (docs/safety.md).

Spark 4.0, the first release line with format V2, writes zip `metadata` as `v2` and refuses the
`v1` that 4.1 and later write; only 4.1 and later write Spark's `.crc` sidecars (unless
spark.sql.streaming.checkpoint.fileChecksum.enabled is off). Every action that writes Spark's
formats into a checkpoint (compaction's snapshots, repartition's state written by the project's
Spark) asks here first; `tests/checkpoint/analysis/test_generations.py` restarts each proven generation.
"""

from __future__ import annotations

from checkpoint.format import WRITTEN_ZIP_METADATA_VERSION
from checkpoint.model import Checkpoint, StoreLineage

# The Sparks proven by a restart to read what this release writes into a format V2 checkpoint.
PROVEN_SPARKS = "4.1 to 4.3"


def unproven_writer(ckpt: Checkpoint, entry: StoreLineage) -> str | None:
    """Why the Spark that wrote `entry`'s store is not one this release has proven, or None when it
    is. Its base zip's metadata line tells (`v2`: 4.0; `v1`: 4.1 or later: one ranged read of the
    zip); with no base, the committed file's `.crc` sidecar (one HEAD). A store that shows neither
    cannot be told apart from 4.0's. Format V1 is proven whatever wrote it: Spark's own provider
    writes the HDFS-backed store's snapshots, and every Spark 4.x writes V1 zips with metadata v1,
    as this release does (seen in zips of 4.0.5, 4.1.4, 4.2.1 and 4.3)."""
    return ckpt.states.writer(lambda: _unproven(ckpt, entry))


def _unproven(ckpt: Checkpoint, entry: StoreLineage) -> str | None:
    if entry.base is not None:
        version = ckpt.read_snapshot(entry.base).metadata.version
        if version == WRITTEN_ZIP_METADATA_VERSION:
            return None
        return (f"{entry.store} was written by a Spark whose snapshots carry metadata v{version} (Spark "
                f"4.0 in format V2); this release writes v{WRITTEN_ZIP_METADATA_VERSION}, proven only "
                f"under Spark {PROVEN_SPARKS}")  # fmt: skip
    sidecar = ckpt.states.sidecar_of(entry.committed_file.rel) if entry.committed_file is not None else None
    if sidecar is not None and ckpt.storage.stat(sidecar) is not None:
        return None
    return (f"cannot tell which Spark wrote {entry.store}: it has no snapshot and its changelog no .crc "
            f"sidecar (Spark {PROVEN_SPARKS} write one unless spark.sql.streaming.checkpoint."
            "fileChecksum.enabled is off; Spark 4.0 never does, and refuses the snapshot this release "
            "writes)")  # fmt: skip
