"""Copies of corpus checkpoints that name themselves (tests and benches).

Operator metadata v2 (transformWithState, joins with state format 3) names its schema files by
absolute path, so a plain copy still reads the original's and validation rightly calls it moved
(MOVED_CHECKPOINT). A test copy gets its own paths written in, as if its query had created it
there; the Hadoop `.crc` of each rewritten file goes (Hadoop reads a file without one unchecked).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from checkpoint.fork import rewrite_schema_paths
from checkpoint.storage import Storage


def copy_checkpoint(src: Path | str, dst: Path | str) -> Path:
    dst = Path(dst)
    shutil.copytree(src, dst)
    here = Storage(str(dst)).spark_url
    for meta in dst.glob("state/*/_metadata/v2/*"):
        if meta.name.startswith("."):
            continue
        meta.write_bytes(rewrite_schema_paths(meta.read_bytes(), here, str(meta)))
        (meta.parent / f".{meta.name}.crc").unlink(missing_ok=True)
    return dst
