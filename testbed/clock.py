"""A manual clock on files' times: a copy of a checkpoint dated back, or to an age, so that what
depends on its age (dormancy, the quiet period, the grace) is tested whatever the age of the cache
it was copied from (tests, benches and the demo use it)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def date_back(root: Path, seconds: float) -> None:
    """Every file's mtime moves `seconds` into the past, their order kept."""
    for p in root.rglob("*"):
        then = p.stat().st_mtime - seconds
        os.utime(p, (then, then), follow_symlinks=False)


def date_to(root: Path, age_seconds: float, now: float | None = None) -> None:
    """`date_back` to an age: the newest file is `age_seconds` old, whatever the folder's age was
    (a corpus copy keeps its files' times, so a test would otherwise depend on the cache's age)."""
    newest = max((p.stat().st_mtime for p in root.rglob("*")), default=None)
    if newest is not None:
        date_back(root, newest - ((time.time() if now is None else now) - age_seconds))
