"""Listing a large tree as several prefixes at once: on S3 the wall time falls with the number of
folders listed together."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from checkpoint.progress import Progress, report
from checkpoint.storage.files import Calls, FileInfo, carrying_watch

log = logging.getLogger(__name__)
_PROGRESS_EVERY = 50_000  # files between progress lines of a long listing


class Lister(Protocol):
    """What a tree listing needs of a root (`front.Storage` is one)."""

    url: str
    calls: Calls

    def list_files(self, under: str = "") -> list[FileInfo]: ...

    def list_outside(self, folders: list[str]) -> list[FileInfo]: ...


def list_tree(storage: Lister, folders: Iterable[str], workers: int) -> list[FileInfo]:
    """Every file under the root, as `list_files` gives it, listed as several prefixes at once.

    `folders` are disjoint folders that together with the files outside them cover the root
    (cleanup planning passes one folder per state partition); each is listed by its own
    recursive listing, concurrently, and the rest by one listing that skips them. On S3 the
    wall time then falls with the number of folders. Any failure fails the whole listing."""
    folders = sorted(set(folders))
    if not folders:
        return storage.list_files()
    seen = 0
    lock = threading.Lock()

    def one(folder: str) -> list[FileInfo]:
        nonlocal seen
        got = storage.list_files(folder)
        with lock:
            before, seen = seen, seen + len(got)
            if seen // _PROGRESS_EVERY > before // _PROGRESS_EVERY:
                report(
                    log,
                    Progress("files listed", seen, None),
                    "%s: listed %d files in %d requests",
                    storage.url,
                    seen,
                    storage.calls.total(),
                )
        return got

    with ThreadPoolExecutor(max(1, min(workers, len(folders)))) as pool:
        parts = list(pool.map(carrying_watch(one), folders))
    inside = tuple(f + "/" for f in folders)
    rest = [f for f in storage.list_outside(folders) if not f.rel.startswith(inside)]
    files = rest + [f for part in parts for f in part]
    files.sort(key=lambda f: f.rel)
    return files
