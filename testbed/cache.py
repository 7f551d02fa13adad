"""Where the generated corpora live (outside the repository, keyed by generator version) and how
one is generated once: in a child process, under a lock the test workers share, the manifest last."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MANIFEST = "manifest.json"


def cache_home() -> Path:
    """`~/.cache/ckpt-maint` (XDG_CACHE_HOME honoured): the corpora and the tests' jars."""
    return Path(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))) / "ckpt-maint"


def corpus_base() -> Path:
    """Where the corpora's versions live; CKPT_CORPUS_CACHE moves it."""
    return Path(os.environ.get("CKPT_CORPUS_CACHE") or cache_home() / "corpus")


@contextmanager
def cache_lock(target: Path) -> Iterator[None]:
    """Held while `target` is filled: test workers (pytest-xdist) and concurrent runs on one cache
    wait for the first to finish, then find its output, instead of writing over each other."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_generated(cache: Path, command: list[str], what: str, log=print) -> Path:
    """`cache`, generated first by `python <command> <cache>` in a child process when it has no
    manifest (an incomplete one is removed first); the child writes the manifest last."""
    if (cache / MANIFEST).exists():
        return cache
    with cache_lock(cache):
        if (cache / MANIFEST).exists():  # another process generated it while this one waited
            return cache
        if cache.exists():
            log(f"corpus: removing the incomplete corpus at {cache}")
            shutil.rmtree(cache)
        started = time.monotonic()
        log(f"corpus: generating {what} into {cache}")
        result = subprocess.run([sys.executable, *command, str(cache)], check=False)
        if result.returncode != 0 or not (cache / MANIFEST).exists():
            raise RuntimeError(f"generating {what} failed (exit {result.returncode}); output in {cache}")
        log(f"corpus: {what} generated in {time.monotonic() - started:.0f} s")
    return cache
