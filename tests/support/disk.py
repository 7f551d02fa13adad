"""Room on disk for a run of the suite, checked before its first test.

A disk that fills midway does not fail one test: every test after it errors in its setup, Postgres
stops writing, and Dagster's runs wait until the run is cut off by its time limit (one CI run hung
90 minutes so). Said at the start, the same shortage is one line and a minute.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Mapping
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


# Where a Linux machine keeps a file system in memory that anyone may use, and what the suite asks
# of it and of the memory not in use before it puts its temporary files there: four times their
# sampled peak (`TEMP_PEAK_GIB` in tests/conftest.py), since they take memory the JVMs also need.
RAM = Path("/dev/shm")
RAM_TEMP_GIB = 4


def _available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def _mount_of(path: Path, mounts: str) -> tuple[str, list[str]]:
    """The file system type and options of the mount that holds `path` (`/proc/mounts`' text)."""
    best: tuple[int, str, list[str]] = (-1, "", [])
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1].replace("\\040", " ")
        if (str(path) + "/").startswith(point.rstrip("/") + "/") and len(point) > best[0]:
            best = (len(point), fields[2], fields[3].split(","))
    return best[1], best[2]


def ram_temp(
    need: int,
    environ: Mapping[str, str] = os.environ,
    ram: Path = RAM,
    mounts: Callable[[], str] = lambda: Path("/proc/mounts").read_text(),
    free: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
    available: Callable[[], int] = _available,
) -> Path | None:
    """A folder of this user's on the machine's memory-backed file system, for the suite's
    temporary files, or None to keep them where they are: when `TMPDIR` is set (the person's
    choice stands), when there is no tmpfs at `ram`, when it is mounted `noexec` (RocksDB's and
    lz4's native libraries are unpacked into the JVM's temporary folder and mapped from there), or
    when it or the machine's memory has less than `need` bytes free.

    Why: the suite writes about 6 GiB of temporary files, and the product, RocksDB, SQLite and
    Postgres fsync what they publish. On the disk that cost a quarter of the machine's CPU in the
    kernel (docs/testing.md). No test depends on the disk under its temporary files: the tests of a
    full disk mount their own (`tests/support/hostile.py`)."""
    if environ.get("TMPDIR"):
        return None
    try:
        kind, options = _mount_of(ram, mounts())
        if kind != "tmpfs" or "noexec" in options or not ram.is_dir() or min(free(ram), available()) < need:
            return None
        folder = ram / f"ckpt-tests-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)  # another user's folder, or a link planted in a world-writable place
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return None
    return folder
