"""What a folder holds, to prove that an action wrote nothing (or only where it may)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`, hidden ones included, with its size and mtime in nanoseconds."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}  # fmt: skip


def digests_of(root: Path) -> dict[str, str]:
    """Every file under `root` with the SHA-256 of its bytes: equal only where nothing changed."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def files_under(root: Path) -> set[str]:
    """The names of every file under `root`: `files_of`'s, without their sizes and times."""
    return set(files_of(root))
