"""The `ckpt` console script this interpreter installed, run as a user runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CKPT = shutil.which("ckpt", path=str(Path(sys.executable).parent)) or "ckpt"


def ckpt(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`env`: variables set on top of this process's environment (a crash point)."""
    environ = {**os.environ, **env} if env else None
    return subprocess.run([CKPT, *args], capture_output=True, text=True, timeout=timeout, env=environ)


# Runs argv[2:] and writes its exit status and peak RSS (KiB) to argv[1]. The kernel's peak of a
# process counts its parent's pages until it execs (fork, or vfork's shared memory), so `ckpt` is
# started from this small interpreter, not from the test's, which may hold hundreds of MB.
_MEASURE = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def measured(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """`ckpt ARGS` as `ckpt` runs it, and the peak RSS in bytes of it and every process it waited
    for (the kernel's count, `wait4`)."""
    import tempfile

    environ = {**os.environ, **env} if env else None
    with tempfile.TemporaryDirectory() as tmp:
        figures = os.path.join(tmp, "figures")
        out = subprocess.run([sys.executable, "-c", _MEASURE, figures, CKPT, *args], capture_output=True,
                             text=True, env=environ, check=False)  # fmt: skip
        code, kib = (int(n) for n in open(figures).read().split())
    return subprocess.CompletedProcess([CKPT, *args], code, out.stdout, out.stderr), kib * 1024
