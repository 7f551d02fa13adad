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
