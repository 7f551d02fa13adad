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


def measured(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """`ckpt ARGS` as `ckpt` runs it, and the peak RSS in bytes of it and every process it waited
    for (the kernel's count, `wait4`)."""
    import tempfile

    environ = {**os.environ, **env} if env else None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen([CKPT, *args], stdout=out, stderr=err, env=environ)
        _, status, usage = os.wait4(child.pid, 0)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(
            [CKPT, *args], os.waitstatus_to_exitcode(status), out.read().decode(), err.read().decode()
        )
    return done, usage.ru_maxrss * 1024
