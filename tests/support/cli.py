"""The `ckpt` console script this interpreter installed, run as a user runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CKPT = shutil.which("ckpt", path=str(Path(sys.executable).parent)) or "ckpt"


def ckpt(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([CKPT, *args], capture_output=True, text=True, timeout=timeout)
