"""What storage answers with: a file of a listing, a folder, the call counter, and how a failed
call becomes a one-line error. Shared by the front and every backend."""

from __future__ import annotations

import datetime as _dt
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from checkpoint.errors import Abandoned, StorageError

T = TypeVar("T")

VANISHED = "file vanished while reading"  # a file a listing or a log named is gone


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One file of a listing. `mtime` is seconds since the epoch, or None when the backend has none."""

    rel: str
    size: int
    mtime: float | None
    # Whether it is a symlink, when the listing says (local disks); None: not known
    link: bool | None = field(default=None, compare=False)
    # A FIFO, a device or a socket, which no read opens (local disks); never a link
    special: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Folder:
    """One shallow listing: the files directly in a folder and the names of its subfolders."""

    files: tuple[FileInfo, ...]
    folders: tuple[str, ...]
    exists: bool


# A thread cannot be killed, so a look its caller stopped waiting for (`within_deadline`) went on
# sending requests to a store that was already slow, beside the look started in its place, and the
# next tick's. Every request is counted before it is sent, so the count is where such a thread
# learns that it was given up, and stops; and where its caller learns that it is being answered,
# slowly, rather than hanging.
_watched = threading.local()


class Watch:
    """What the storage requests of one look tell the thread waiting on it: how many it has sent
    (each after the one before was answered), and whether it was given up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent = 0
        self.given_up = threading.Event()

    @property
    def sent(self) -> int:
        return self._sent

    def count(self, kind: str, n: int) -> None:
        if self.given_up.is_set():
            raise Abandoned(f"its caller stopped waiting; no {kind} request sent")
        with self._lock:  # a look's pool counts from several threads
            self._sent += n


def current_watch() -> Watch | None:
    """The watch this thread's storage requests count in, if any."""
    return getattr(_watched, "watch", None)


def watch_requests(watch: Watch | None) -> None:
    """From now on, each storage request this thread sends is counted in `watch`, and raises
    `Abandoned` instead once `watch.given_up` is set (None: no watch). Requests already sent
    finish; those handed to another thread are watched only through `carrying_watch`."""
    _watched.watch = watch


def carrying_watch(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, to run in another thread (a pool's) under this thread's watch: the requests a look
    hands to its pool count as its own, and stop with it."""
    watch = current_watch()
    if watch is None:
        return fn

    def watched(*args: Any, **kwargs: Any) -> T:
        before = current_watch()
        _watched.watch = watch
        try:
            return fn(*args, **kwargs)
        finally:
            _watched.watch = before

    return watched


class Calls:
    """Storage calls by kind (list, list_dir, stat, read, ...): thread-safe, shared by children."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, kind: str, n: int = 1) -> None:
        watch = current_watch()
        if watch is not None:
            watch.count(kind, n)
        with self._lock:
            self._counts[kind] += n

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


def mtime_of(entry: dict[str, Any]) -> float | None:
    # Local files carry `mtime` (float); S3 `LastModified` (datetime); other backends vary.
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified"):
        value = entry.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, _dt.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def folder_marker(name: str, size: int) -> bool:
    """An empty object named as a folder (`<folder>/`): what Spark's GCS connector writes for each
    folder it makes (and some tools on Blob Storage). No file."""
    return name.endswith("/") and not size


def found_files(entries: dict[str, dict[str, Any]], prefix: str, top: str) -> list[FileInfo]:
    """FileInfos of an fsspec `find` under `top`, cut to the root `prefix` names."""
    under = top + "/" != prefix
    files = []
    for name, entry in entries.items():
        if folder_marker(name, int(entry.get("size") or 0)):
            continue
        name = name.rstrip("/")
        if not name.startswith(prefix) or (under and not name.startswith(top + "/")):
            # A lone file given as the root lists as itself: that is not a checkpoint folder.
            continue
        link = entry.get("islink")
        files.append(FileInfo(name[len(prefix) :], int(entry.get("size") or 0), mtime_of(entry),
                              None if link is None else bool(link)))  # fmt: skip
    return files


@contextmanager
def failing(what: str, where: str, vanished: str | None = None) -> Iterator[None]:
    """What fsspec and botocore raise, as the one error the core handles: a StorageError naming the
    path (`<what> failed: <why>`, or `vanished` for a file a listing named that is gone). A caller
    that expects a missing file catches FileNotFoundError inside the block."""
    try:
        yield
    except FileNotFoundError as exc:
        raise StorageError(vanished or f"{what} failed: {exc}", where) from exc
    except OSError as exc:
        raise StorageError(f"{what} failed: {exc}", where) from exc
    except Exception as exc:
        if not client_error(exc):
            raise
        # Azure's text goes on with the request's id, time and the XML body: its first line and
        # its code say it.
        first = next(iter(str(exc).strip().splitlines()), "")
        code = getattr(exc, "error_code", None)
        code = getattr(code, "value", code)  # azure's StorageErrorCode enum: its name as Azure spells it
        why = f"{first} ({code})" if code and str(code) not in first else first
        raise StorageError(f"{what} failed: {type(exc).__name__}: {why}", where) from exc


def client_error(exc: BaseException) -> bool:
    """An error of a store's own client library that its fsspec filesystem lets through instead
    of an OSError: azure-core's (adlfs passes a refused range or a throttled request on as
    `HttpResponseError`), botocore's (no credentials found, a malformed endpoint)."""
    return type(exc).__module__.startswith(("azure.core.", "botocore."))


def http_status(exc: BaseException) -> int | None:
    """The HTTP status a store answered with, from the error or the one it was raised from:
    botocore's response dict, azure-core's `status_code`."""
    for e in (exc, exc.__cause__):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(getattr(e, "status_code", None), int):
            return e.status_code  # type: ignore[union-attr]
    return None


def write_error(exc: OSError, target: str) -> Exception:
    """A conditional write the store refused (412, or 409 for a concurrent conditional write) is
    FileExistsError; anything else a StorageError."""
    text = str(exc).lower()
    response = getattr(exc.__cause__, "response", None)
    code = str(response.get("Error", {}).get("Code", "")).lower() if isinstance(response, dict) else ""
    if http_status(exc) in (409, 412) or "precondition" in code + text or "pre-condition" in text:
        return FileExistsError(target)
    return StorageError(f"write failed: {exc}", target)
