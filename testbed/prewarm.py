"""The corpora a test session needs, generated side by side in the background from its start.

Each corpus is generated on first use, under its own lock (`cache.ensure_generated`). Left to its
first user, a cold cache generates them one after another, in whatever order the tests reach them,
while the workers that need one wait idle: on a new machine that made the suite minutes longer.
Started at once (the three largest corpora, and the other PySparks' virtualenvs and checkpoints),
they share the cores with the first tests instead. A fixture that needs one still calls its
`ensure_*`, which waits on the lock and finds the corpus there; if the background generation
failed, the fixture generates it again and fails loudly.

    python -m testbed.prewarm corpus defaults rescue generations classes
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _corpora() -> dict[str, tuple[Callable[[], object], Callable[[], bool]]]:
    """name -> (its ensure function, whether the cache holds it complete)."""
    from testbed import cache, class_archive, corpus, defaults, generations, generators

    def manifest_in(folder: Path) -> Callable[[], bool]:
        return lambda: (folder / cache.MANIFEST).exists()

    return {
        "corpus": (corpus.ensure_corpus, manifest_in(corpus.default_cache_dir())),
        "defaults": (defaults.ensure_defaults_corpus, manifest_in(defaults.default_cache_dir())),
        "rescue": (generators.ensure_rescue_corpus, manifest_in(generators.rescue_cache_dir())),
        # The other PySparks' virtualenvs and checkpoints, used by few tests, so late under xdist.
        "generations": (generations.ensure_every_release, generations.every_release_ready),
        # Spark's classes for the suite's JVMs, which start without it until it is there.
        "classes": (
            lambda: class_archive.ensure(cache.cache_home()),
            lambda: class_archive.ready(cache.cache_home()),
        ),
    }


def missing(names: list[str]) -> list[str]:
    """Those of `names` that the cache does not hold complete."""
    corpora = _corpora()
    return [name for name in names if not corpora[name][1]()]


def start(names: list[str], log: Path) -> subprocess.Popen | None:
    """Generates the missing ones of `names` in a background process group (output in `log`);
    None when every one is there."""
    if not (todo := missing(names)):
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "testbed.prewarm", *todo], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def stop(process: subprocess.Popen | None) -> None:
    """Ends a background generation still running (a session cut short): its generators and their
    JVMs are in its process group. What it left incomplete is removed by the next `ensure_*`."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def main(argv: list[str] | None = None) -> None:
    names = sys.argv[1:] if argv is None else argv
    corpora = _corpora()
    with ThreadPoolExecutor(len(names) or 1) as pool:
        futures = {name: pool.submit(corpora[name][0]) for name in names}
    failed = [name for name, future in futures.items() if future.exception() is not None]
    for name in failed:
        print(f"prewarm: {name} failed: {futures[name].exception()}", flush=True)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
