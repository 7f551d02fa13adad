"""Ways to damage a copied checkpoint, each aimed at one finding.

Rewritten changelogs keep a correct `.crc` sidecar unless the damage is the sidecar itself, so a
test sees the one finding it aims at, also in deep mode.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from checkpoint.format.codec import Lz4BlockReader
from checkpoint.format.crc import crc32c_signed
from checkpoint.format.layout import FileKind
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import StoreLineage, checkpoint_lineage
from testbed.lz4java import frame, java_utf


def lineage_of(path: Path, partition: int = 0, operator: int = 0, store: str = "default") -> StoreLineage:
    ckpt = load_checkpoint(str(path))
    return next(
        e
        for e in checkpoint_lineage(ckpt)
        if (e.store.operator, e.store.partition, e.store.store) == (operator, partition, store)
    )


def fix_sidecar(main: Path) -> None:
    sidecar = main.with_name(main.name + ".crc")
    if sidecar.exists():
        body = json.loads(sidecar.read_text())
        data = main.read_bytes()
        body.update(value=crc32c_signed(data), mainFileSize=len(data))
        sidecar.write_text(json.dumps(body))


def rewrite_header(main: Path, edit: Callable[[str, str], tuple[str, str]]) -> None:
    """Re-encode a v3/v4 changelog with an edited (version string, lineage JSON), records untouched."""
    raw = Lz4BlockReader(io.BytesIO(main.read_bytes()).read, str(main)).read(-1)
    (n,) = struct.unpack_from(">H", raw, 0)
    version = raw[2 : 2 + n].decode()
    (m,) = struct.unpack_from(">H", raw, 2 + n)
    lineage = raw[4 + n : 4 + n + m].decode()
    version, lineage = edit(version, lineage)
    main.write_bytes(frame(java_utf(version) + java_utf(lineage) + raw[4 + n + m :]))
    fix_sidecar(main)


def rewrite_lineage(main: Path, edit: Callable[[str], str]) -> None:
    rewrite_header(main, lambda version, lineage: (version, edit(lineage)))


def rewrite_version(main: Path, version: str) -> None:
    rewrite_header(main, lambda _, lineage: (version, lineage))


def drop_lineage_versions(main: Path, versions: set[int]) -> None:
    rewrite_lineage(
        main, lambda text: json.dumps([e for e in json.loads(text) if e["version"] not in versions])
    )


def pad_lineage(main: Path, total: int) -> None:
    """Whitespace is valid JSON: the lineage stays the same while its header grows to `total` bytes."""
    rewrite_lineage(main, lambda text: text[:-1] + " " * (total - len(text)) + "]")


def flip_last_byte_of_first_block(main: Path) -> None:
    data = bytearray(main.read_bytes())
    (clen,) = struct.unpack_from("<i", data, 9)
    data[21 + clen - 1] ^= 0x01  # LZ4 ends every block with literals: content changes, parse does not
    main.write_bytes(bytes(data))
    fix_sidecar(main)


def remove(path: Path) -> None:
    """A file gone as Spark deletes it: with its Spark `.crc` sidecar, and the hidden `.<name>.crc`
    and `.<name>.crc.crc` that Hadoop's local file system deletes with each (left behind, they fail
    any new file of those names on every read)."""
    sidecar = path.name + ".crc"
    for name in (path.name, sidecar, f".{sidecar}", f".{sidecar}.crc"):
        path.with_name(name).unlink(missing_ok=True)


def zip_files(path: Path, entry: StoreLineage) -> list[Path]:
    """The zips named by a store's committed lineage."""
    ckpt = load_checkpoint(str(path))
    store = ckpt.stores[entry.store]
    found = [store.file(FileKind.ZIP, e.version, e.unique_id) for e in entry.header.lineage]
    return [path / f.rel for f in found if f is not None]


def before_the_last_upload(checkpoint: Path) -> None:
    """Each store's snapshot of its newest version taken away, as before the maintenance round
    that uploads it: how Spark left a store is timing, and one that loads from its own snapshot
    has no chain to compact. The newest changelog's lineage names an older base, which stays."""
    for store in {p.parent for p in checkpoint.glob("state/**/*.changelog")}:
        newest = max(int(p.name.split("_")[0]) for p in store.glob("*.changelog"))
        for path in store.glob(f"{newest}_*.zip"):
            remove(path)


def checkpoint_root_of(path: Path) -> Path:
    """The checkpoint folder that holds `path`: the nearest folder above with `metadata` and `offsets/`."""
    for folder in path.parents:
        if (folder / "metadata").is_file() and (folder / "offsets").is_dir():
            return folder
    raise ValueError(f"{path} is in no checkpoint")


def link_outside(path: Path, name: str = "outside") -> Path:
    """`path` (a file or a folder) moved to a folder beside its checkpoint and linked back, as an
    operator with write access to a root could: the same bytes, reached through a link. Returns
    where they now are."""
    outside = checkpoint_root_of(path).parent / name / path.relative_to(checkpoint_root_of(path))
    outside.parent.mkdir(parents=True, exist_ok=True)
    path.rename(outside)
    path.symlink_to(outside)
    return outside


def fifo_for(path: Path) -> None:
    """A FIFO where a file was (or where one is expected): a reader that blocks on it hangs."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def widened_lately(checkpoint: Path, batches: int = 3) -> None:
    """The newest `batches` batches run with twice the partitions, as after a repartition a few
    batches ago (format V2): their commits name the ids of partition p for p + n too, their offsets
    pin 2n shuffle partitions, and the new partitions' folders hold the old ones' files. The
    operator metadata keeps the first run's count, as Spark's repartitioning leaves it."""
    newest = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())[-batches:]
    width = 0
    for batch in newest:
        head, entry, *rest = (checkpoint / "commits" / str(batch)).read_text().split("\n")
        commit = json.loads(entry)
        for op, partitions in commit["stateUniqueIds"].items():
            width = len(partitions)
            commit["stateUniqueIds"][op] = partitions * 2
        (checkpoint / "commits" / str(batch)).write_text("\n".join([head, json.dumps(commit), *rest]))
        offsets = checkpoint / "offsets" / str(batch)
        pinned, wider = (f'"spark.sql.shuffle.partitions":"{n}"' for n in (width, 2 * width))
        assert pinned in offsets.read_text(), offsets
        offsets.write_text(offsets.read_text().replace(pinned, wider))
        for log in ("commits", "offsets"):
            (checkpoint / log / f".{batch}.crc").unlink(missing_ok=True)
    for op in (checkpoint / "state").iterdir():
        for p in range(width):
            if (op / str(p)).is_dir():
                shutil.copytree(op / str(p), op / str(p + width))


def newest_commit(path: Path) -> int:
    return max(int(p.name) for p in (path / "commits").iterdir() if p.name.isdigit())


def root_with_a_bad_checkpoint(corpus, tmp_path: Path, damage_it: Callable[[Path], None]) -> Path:
    """A root holding `bad` (a real checkpoint, then a file in its commit log's next place damaged
    by `damage_it`) and `healthy` (the same, untouched)."""
    from testbed.copying import copy_checkpoint

    root = tmp_path / "root"
    for name in ("bad", "healthy"):
        copy_checkpoint(corpus["snapshots"], root / name)
    damage_it(root / "bad" / "commits" / str(newest_commit(root / "bad") + 1))
    return root


# What can sit where Spark writes a file, and the finding each is: (make it at a path, finding code).
IN_THE_COMMIT_LOG = {
    "a FIFO": (fifo_for, "NOT_A_REGULAR_FILE"),
    "a link to /dev/zero": (lambda p: p.symlink_to("/dev/zero"), "FILE_OUTSIDE_CHECKPOINT"),
}


def edit_metadata(path: Path, op: int, edit: Callable[[dict], dict]) -> None:
    """Operator `op`'s metadata body as `edit` returns it, its sidecar dropped."""
    metadata = path / f"state/{op}/_metadata/metadata"
    head, body = metadata.read_text().split("\n", 1)
    metadata.write_text(head + "\n" + json.dumps(edit(json.loads(body)), separators=(",", ":")))
    (metadata.parent / ".metadata.crc").unlink(missing_ok=True)


def declare_partitions(count: int) -> Callable[[dict], dict]:
    """An `edit_metadata` edit: every store of the operator declares `count` partitions."""

    def edit(body: dict) -> dict:
        for store in body["stateStoreInfo"]:
            store["numPartitions"] = count
        return body

    return edit


def pin_shuffle(path: Path, value: str) -> None:
    """Every offset file pins `spark.sql.shuffle.partitions` to `value`, their sidecars dropped."""
    for offsets in (path / "offsets").glob("[0-9]*"):
        text = re.sub(r'"spark.sql.shuffle.partitions":"[^"]*"', f'"spark.sql.shuffle.partitions":"{value}"',
                      offsets.read_text())  # fmt: skip
        offsets.write_text(text)
        (offsets.parent / f".{offsets.name}.crc").unlink(missing_ok=True)
