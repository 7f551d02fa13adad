"""The oracle of what Spark's recovery at a batch reads, from a full listing of the checkpoint.

A fork reads head-first (checkpoint.model.head) and must copy exactly this set; tests and the fork
benchmark compare against it: the logs up to the batch, the operator metadata and schema files,
and per store the committed zip, or the base zip, the SSTs it lists and the changelog chain; each
zip and changelog with its `.crc` sidecar when Spark wrote one.
"""

from __future__ import annotations

from pathlib import Path

from checkpoint.format import FileKind
from checkpoint.model import checkpoint_lineage, load_checkpoint

_LOGS = (
    FileKind.OFFSET,
    FileKind.COMMIT,
    FileKind.SOURCE_LOG,
    FileKind.OPERATOR_METADATA,
    FileKind.STATE_SCHEMA,
)


def recovery_files(path: Path | str, batch: int) -> dict[str, int]:
    """Relative path -> size of every file recovery at `batch` reads."""
    ckpt = load_checkpoint(str(path))
    sizes = {f.rel: f.info.size for f in ckpt.files}
    out = {"metadata"}
    out |= {f.rel for f in ckpt.files if f.kind in _LOGS and (f.what.batch is None or f.what.batch <= batch)}
    for entry in checkpoint_lineage(ckpt, batch):
        committed = entry.committed_file
        if committed.kind in (FileKind.ZIP, FileKind.SNAPSHOT):
            files = [committed]
        else:
            files = [*([entry.base] if entry.base else []), *entry.chain]
        for f in files:
            out |= {f.rel} | ({f"{f.rel}.crc"} & sizes.keys())
            if f.kind == FileKind.ZIP:
                folder = f.rel.rsplit("/", 1)[0]
                out |= {f"{folder}/SSTs/{s.dfs_name}" for s in ckpt.read_snapshot(f).metadata.sst_files}
    return {rel: sizes[rel] for rel in sorted(out)}
