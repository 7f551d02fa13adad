"""Finding checkpoints under a root, at any depth, from one listing of the root."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .layout import BATCH_FILE, classify
from .model import Checkpoint, CheckpointFile, build_checkpoint
from .storage import FileInfo, Storage


@dataclass(frozen=True)
class FoundCheckpoint:
    rel: str  # the folder relative to the root ("" when the root is a checkpoint)
    url: str
    files: tuple[FileInfo, ...]  # relative to the checkpoint folder

    def load(self, root: Storage, strict: bool = True) -> Checkpoint:
        storage = root.child(self.rel)
        return build_checkpoint(
            storage, tuple(CheckpointFile(f, classify(f.rel)) for f in self.files), strict
        )


def _folder(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def find_checkpoints(root: Storage) -> list[FoundCheckpoint]:
    """Folders holding a query `metadata` file beside an offset or commit log.

    Operator metadata (`state/<op>/_metadata/metadata`) has no log beside it, so it never counts.
    Files of a checkpoint nested in another are given to the innermost one.
    """
    files = root.list_files()
    names = {f.rel for f in files}
    roots = set()
    for f in files:
        parts = f.rel.split("/")
        if len(parts) >= 2 and parts[-2] in ("offsets", "commits") and BATCH_FILE.match(parts[-1]):
            folder = "/".join(parts[:-2])
            if _join(folder, "metadata") in names:
                roots.add(folder)
    by_root: dict[str, list[FileInfo]] = {r: [] for r in roots}
    ordered = sorted(roots, key=len, reverse=True)
    for f in files:
        for r in ordered:
            if r == "" or f.rel.startswith(r + "/"):
                rel = f.rel[len(r) + 1 :] if r else f.rel
                by_root[r].append(FileInfo(rel, f.size, f.mtime))
                break
    return [
        FoundCheckpoint(r, f"{root.url}/{r}" if r else root.url, tuple(by_root[r])) for r in sorted(roots)
    ]


def scan(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Storage, list[FoundCheckpoint]]:
    storage = Storage(url, storage_options)
    return storage, find_checkpoints(storage)
