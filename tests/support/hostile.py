"""What the tests of a hostile filesystem share: a copy dated as a query stopped long ago left it, a
disk that is all but full (`small_disk`, a fixture of the whole suite through `tests/conftest.py`),
and whether a checkpoint's lease was given back."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from checkpoint.safety import lease_for
from checkpoint.storage import Storage


def aged(path: Path, hours: float = 10) -> Path:
    """Every file dated `hours` back, as a query stopped that long ago left it."""
    old = time.time() - hours * 3600
    for folder, _, names in os.walk(path):
        for name in names:
            os.utime(os.path.join(folder, name), (old, old), follow_symlinks=False)
    return path


def lease_is_free(path: Path) -> bool:
    """Whether another holder could take the checkpoint's lease now (and gives it back)."""
    lease = lease_for(Storage(str(path)), owner="test")
    with lease.acquire():
        return True


@pytest.fixture
def small_disk(tmp_path: Path):
    """A tmpfs of its own (root only, as CI runs), filled by the test to leave a few pages."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A file that leaves `leave` bytes free on `disk`."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, shutil.disk_usage(disk).free - leave))
    return filler
