"""Copies of corpus checkpoints that name themselves (tests and benches).

Operator metadata v2 (transformWithState, joins with state format 3) names its schema files by
absolute path, so a plain copy still reads the original's and validation rightly calls it moved
(MOVED_CHECKPOINT). A test copy gets its own paths written in, as if its query had created it
there; the Hadoop `.crc` of each rewritten file goes (Hadoop reads a file without one unchecked).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from checkpoint.fork import rewrite_schema_paths
from checkpoint.format import FileKind, classify
from checkpoint.storage import Storage


def copy_checkpoint(src: Path | str, dst: Path | str) -> Path:
    dst = Path(dst)
    shutil.copytree(src, dst)
    return naming_itself(dst)


def naming_itself(checkpoint: Path) -> Path:
    """A checkpoint copied to where it is now, its own paths written in; every file and folder
    keeps the time the copy gave it, so that a test's manual clock (`testbed.clock.date_to`) counts
    from the query's last write, not from the rewrite."""
    here = Storage(str(checkpoint)).spark_url
    for meta in checkpoint.glob("state/*/_metadata/v2/*"):
        if meta.name.startswith("."):
            continue
        times = [(p, p.stat()) for p in (meta, meta.parent)]
        meta.write_bytes(rewrite_schema_paths(meta.read_bytes(), here, str(meta)))
        (meta.parent / f".{meta.name}.crc").unlink(missing_ok=True)
        for p, st in times:
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    return checkpoint


def hadoop_checksum(path: str) -> bool:
    """Whether the file at `path` is Hadoop's hidden checksum of the file beside it
    (`.<name>.crc`, as the product tells it), which no object store's connector writes. Spark's own
    visible checksum files (`<name>.crc`, from 4.1) are the query's."""
    return classify(path).kind == FileKind.HADOOP_CRC


def upload_checkpoint(
    fs,
    src: Path,
    dest: str,
    protocol: str = "s3",
    spark_root: str | None = None,
    hadoop_checksums: bool = False,
    folder_markers: bool = False,
) -> str:
    """Uploads a local checkpoint to `dest` (`bucket/key` on the object store's filesystem `fs`) as
    Spark would have written it there, naming it `spark_root` (by default `s3a://<dest>`, as the
    s3a connector does); returns its `protocol` URL. Hadoop's hidden .crc files are a local file
    system's: no object store's connector writes them, so they are left behind (half a local
    checkpoint's files, and the requests of every action that copies, deletes or lists each file).
    `hadoop_checksums`: uploaded too, as a copy made with a sync tool carries them (stale beside
    the rewritten metadata). `folder_markers`: every folder (the checkpoint's own too) marked as
    Spark's connector for the store marks the folders it makes (`mark_folders`)."""
    files = [p for p in src.rglob("*") if p.is_file() and (hadoop_checksums or not hadoop_checksum(p.name))]
    fs.put([str(p) for p in files], [f"{dest}/{p.relative_to(src).as_posix()}" for p in files])
    for meta in src.glob("state/*/_metadata/v2/[!.]*"):
        rel = meta.relative_to(src).as_posix()
        fs.pipe(
            f"{dest}/{rel}", rewrite_schema_paths(meta.read_bytes(), spark_root or f"s3a://{dest}", str(meta))
        )
    if folder_markers:
        mark_folders(
            fs,
            protocol,
            [dest, *(f"{dest}/{p.relative_to(src).as_posix()}" for p in src.rglob("*") if p.is_dir())],
        )
    return f"{protocol}://{dest}"


def mark_folders(fs, protocol: str, folders: list[str]) -> None:
    """Writes the empty object that Spark's connector writes for each folder it makes: on GCS
    `<folder>/`; on Blob Storage (WASB, and ABFS on an account without a hierarchical namespace)
    a blob named as the folder with `hdi_isfolder=true` in its metadata."""
    for folder in folders:
        if protocol == "gs":
            fs.pipe_file(f"{folder}/", b"")
        elif protocol == "az":
            fs.pipe_file(folder, b"")
            fs.setxattrs(folder, hdi_isfolder="true")
        else:
            raise ValueError(f"no folder markers known on {protocol}://")
