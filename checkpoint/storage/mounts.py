"""One local folder, one spelling, however it is reached: symlinks, bind mounts and a file system
mounted twice (the maintenance lease's identity, docs/safety.md "one checkpoint, one identity").

A symlink is resolved by the kernel (`realpath`). A bind mount is not: `/mnt/b` bound to `/data/a`
shows one folder under two paths, and `realpath` keeps both. The mount table says where each
mount's root lies inside its file system, so a path maps to (the file system, the path inside it),
and back to the one mount of that file system that shows it with the shortest root: the same
spelling from either side. The spelling is trusted only if the folder it names has the device and
inode of the folder asked about; otherwise (a mount stacked over it, no mount table) the resolved
path stands.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

MOUNTINFO = "/proc/self/mountinfo"


class Mount(NamedTuple):
    device: str  # major:minor: one file system, however many times it is mounted
    root: str  # the folder of that file system that this mount shows
    point: str  # where it shows it


def _unescape(field: str) -> str:
    # The kernel writes space, tab, newline and backslash in mountinfo paths as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(table: str = MOUNTINFO) -> list[Mount]:
    """The mount table of this process's namespace; empty where there is none (not Linux)."""
    try:
        with open(table, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) >= 5:
            out.append(Mount(fields[2], _unescape(fields[3]), _unescape(fields[4])))
    return out


def _under(path: str, folder: str) -> str | None:
    """`path` relative to `folder` ("" for the folder itself), or None when it is not below it."""
    if folder == "/":
        return path.lstrip("/")
    if path == folder:
        return ""
    return path[len(folder) + 1 :] if path.startswith(folder + "/") else None


def _join(folder: str, rel: str) -> str:
    return os.path.join(folder, rel) if rel else folder


def canonical_path(path: str, table: list[Mount] | None = None) -> str:
    """The one spelling of a local folder (or of a file or folder yet to be created: its parent's
    spelling and its name) that every path reaching it shares."""
    real = os.path.realpath(path)
    if not os.path.exists(real):
        parent, name = os.path.split(real)
        return real if parent == real else os.path.join(canonical_path(parent, table), name)
    table = mounts() if table is None else table
    holding = [(m, rel) for m in table if (rel := _under(real, m.point)) is not None]
    if not holding:
        return real
    # The deepest mount point over it; of mounts stacked on one point, the newest (listed last).
    _, (mount, rel) = max(enumerate(holding), key=lambda h: (len(h[1][0].point), h[0]))
    inside = _join(mount.root, rel)
    same_fs = (m for m in table if m.device == mount.device)
    showing = [(m, r) for m in same_fs if (r := _under(inside, m.root)) is not None]
    best, rest = min(showing, key=lambda s: (len(s[0].root), len(s[0].point), s[0].point))
    spelled = _join(best.point, rest)
    try:
        same = os.path.samestat(os.stat(spelled), os.stat(real))
    except OSError:
        same = False
    return spelled if same else real
