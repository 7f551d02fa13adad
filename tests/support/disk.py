"""Room on disk for a run of the suite, checked before its first test.

A disk that fills midway does not fail one test: every test after it errors in its setup, Postgres
stops writing, and Dagster's runs wait until the run is cut off by its time limit (one CI run hung
90 minutes so). Said at the start, the same shortage is one line and a minute.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

GIB = 1024**3


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def shortfall(
    needs: list[tuple[str, Path, int]],
    free: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
) -> list[str]:
    """One line for each disk with less room free than `needs` (what, where, bytes) ask of it
    together: places on one file system share its room."""
    by_disk: dict[int, tuple[Path, list[tuple[str, Path, int]]]] = {}
    for what, path, size in needs:
        there = _existing(path)
        by_disk.setdefault(os.stat(there).st_dev, (there, []))[1].append((what, path, size))
    lines = []
    for there, group in by_disk.values():
        need = sum(size for *_, size in group)
        room = free(there)
        if room < need:
            asked = ", ".join(f"{what} in {path} ({size / GIB:.1f} GiB)" for what, path, size in group)
            lines.append(f"{room / GIB:.1f} GiB free where the suite needs {need / GIB:.1f} GiB: {asked}")
    return lines
