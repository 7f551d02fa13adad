"""Checkpoint storage through fsspec: the one door to bytes.

A checkpoint is addressed by a URL (plain path, file://, s3://, any fsspec protocol). Paths inside the
model are relative to the checkpoint root and always use `/`, whatever the backend.

Reads come in the sizes the work needs: a shallow listing of one folder (one delimiter LIST on S3),
a stat (one HEAD), a whole or ranged read (one GET), and the recursive listing that only cleanup
planning and `inspect` need. Every call is counted in `calls`, shared by a root and its children, so
tests and benchmarks can compare what two checkpoints cost on any backend.
"""

from __future__ import annotations

import datetime as _dt
import errno
import logging
import os
import re
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fsspec.core import split_protocol, url_to_fs
from fsspec.spec import AbstractBufferedFile

from checkpoint.errors import NotACheckpointError, StorageError
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report

log = logging.getLogger(__name__)
_VANISHED = "file vanished while reading"  # a file a listing or a log named is gone
DELETE_MAX_KEYS = 1000  # S3 DeleteObjects' limit per request
_PROGRESS_EVERY = 50_000  # files between progress lines of a long listing
_COPY_OBJECT_MAX = 5 << 30  # S3 copies larger objects only in parts
_HEADS_AT_ONCE = 64  # files `read_heads` reads together: on S3 a partition's headers in a round trip or two


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One file of a listing. `mtime` is seconds since the epoch, or None when the backend has none."""

    rel: str
    size: int
    mtime: float | None
    # Whether it is a symlink, when the listing says (local disks); None: not known
    link: bool | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Folder:
    """One shallow listing: the files directly in a folder and the names of its subfolders."""

    files: tuple[FileInfo, ...]
    folders: tuple[str, ...]
    exists: bool


class Calls:
    """Storage calls by kind (list, list_dir, stat, read, ...): thread-safe, shared by children."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, kind: str, n: int = 1) -> None:
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


def _fsync(path: str) -> None:
    """Makes a local file's bytes, or a folder's entries, durable: without it a power loss can
    leave a published name whose bytes were never written (a zip listing truncated SSTs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ignores_case(path: str) -> bool:
    """Whether the local file system at `path` (which exists, or whose nearest existing folder
    does) finds a name in another case: macOS' and Windows' defaults do, Linux's do not."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    folder, name = os.path.split(path)
    other = name.swapcase()
    if other == name:
        return False
    try:
        return os.path.samefile(path, os.path.join(folder, other))
    except OSError:
        return False


def _renamed(path: str, target: str) -> bool:
    """`path` renamed to `target`; False when they are on two file systems (the caller copies)."""
    try:
        os.replace(path, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        return False
    return True


def _link_into_place(target: str, temp_prefix: str, fill: Callable[[str], Any]) -> Any:
    """Local disk: `fill` writes a temp file `<temp_prefix><name>.<hex>.tmp` beside the target (a
    name cleanup recognises, should a crash leave it), which is fsynced and then hard-linked into
    place, and the folder fsynced. The link fails if the target exists, so nothing is overwritten
    and no partial file ever carries the real name, not even after a power loss. Returns what
    `fill` returned."""
    folder, name = os.path.split(target)
    os.makedirs(folder, exist_ok=True)
    if os.path.lexists(target):
        raise FileExistsError(target)
    temp = os.path.join(folder, f"{temp_prefix}{name}.{uuid.uuid4().hex}.tmp")
    try:
        got = fill(temp)
        _fsync(temp)
        os.link(temp, target)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)
    _fsync(folder)
    return got


def _found_files(entries: dict[str, dict[str, Any]], prefix: str, top: str, under: str) -> list[FileInfo]:
    """FileInfos of an fsspec `find`, cut to the root."""
    files = []
    for name, entry in entries.items():
        name = name.rstrip("/")
        if not name.startswith(prefix) or (under and not name.startswith(top + "/")):
            # A lone file given as the root lists as itself: that is not a checkpoint folder.
            continue
        link = entry.get("islink")
        files.append(FileInfo(name[len(prefix) :], int(entry.get("size") or 0), mtime_of(entry),
                              None if link is None else bool(link)))  # fmt: skip
    return files


_FADVISE = hasattr(os, "posix_fadvise")  # Linux and most Unixes; not macOS


def _local_heads(paths: list[str], ends: list[int]) -> list[bytes]:
    """The first `ends[i]` bytes of each local file, as `cat_ranges` reads them on S3 (the listed
    size bounds each): every file opened and hinted to the kernel first (`posix_fadvise`), so that
    on a cold page cache their disk reads overlap (a lineage header cost a round trip, 90 µs, read
    in turn, and 20 µs a hundred at a time), then each read with one `pread`. Plain descriptors,
    not Python file objects: open, hint, read and close are the four system calls, where `open`
    adds a stat, a tty check and a seek, and a second open for the hint. A file that cannot be
    opened or read raises, and every file opened is closed."""
    opened: list[int] = []
    try:
        for full, n in zip(paths, ends, strict=True):
            try:
                opened.append(os.open(full, os.O_RDONLY))
            except OSError:
                with _failing("read", full, vanished=_VANISHED):
                    raise
            if _FADVISE:
                os.posix_fadvise(opened[-1], 0, n, os.POSIX_FADV_WILLNEED)
        return [_pread_all(fd, n, full) for fd, n, full in zip(opened, ends, paths, strict=True)]
    finally:
        for fd in opened:
            os.close(fd)


def _pread_all(fd: int, n: int, full: str) -> bytes:
    """The first `n` bytes of an open file, or all of it when shorter."""
    try:
        data = os.pread(fd, n, 0)
        while len(data) < n:
            more = os.pread(fd, n - len(data), len(data))
            if not more:
                break
            data += more
    except OSError:
        with _failing("read", full):
            raise
    return data


def _walk_local(top: str, cut: int) -> list[FileInfo]:
    """Every file under a local folder, as fsspec's `find(withdirs=False, detail=True)` lists it
    (a symlink is a file, never followed, sized as its target; entries that vanish meanwhile are
    skipped), built straight from `os.scandir`: fsspec's dict per file is four times a FileInfo,
    and cleanup lists 10^4 to 10^5 files per state partition. Paths are cut `cut` characters in.
    A missing folder, or a file given as the folder, lists as nothing, as with `find`."""
    files: list[FileInfo] = []
    folders = [top]
    while folders:
        folder = folders.pop()
        try:
            entries = os.scandir(folder)
        except (NotADirectoryError, FileNotFoundError):
            continue  # or removed since its parent was listed
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    link = entry.is_symlink()
                    size = st.st_size
                    if link:
                        try:
                            size = os.stat(entry.path).st_size
                        except OSError:
                            size = 0
                except FileNotFoundError:
                    continue
                files.append(FileInfo(entry.path[cut:], size, st.st_mtime, link))
    return files


def normalize_url(url: str) -> str:
    """The one spelling of a URL, given once at the door (Storage) and used for every identity
    derived from it: lease, audit folder, fork marker, partition key.

    Local: an absolute path with `.`, `..` and doubled slashes resolved (`/x/q`, `file:///x/q`,
    `/x//q/` and a relative `q` from `/x` are one path); symlinks are kept, as a user named them.
    Object stores: `<protocol>://bucket/key` with doubled and trailing slashes removed, as Hadoop's
    Path (and so Spark) spells the keys it writes; a protocol's aliases are one protocol (`s3a://`
    and `s3n://` are `s3://`, `gcs://` is `gs://`, `abfs[s]://` is `az://`), and
    `file://localhost/x` is `/x` (RFC 8089).
    """
    url = url.strip()
    if url.startswith("file:") and not url.startswith("file://"):
        url = "file://" + url[len("file:") :]  # Hadoop's spelling of a local path: file:/x/q
    if url.lower().startswith("file://localhost/"):
        url = url[len("file://localhost") :]
    protocol, path = split_protocol(url)
    protocol = (protocol or "file").lower()
    if protocol in ("file", "local"):
        path = os.path.abspath(os.path.expanduser(path))
        return re.sub("/{2,}", "/", path)  # abspath keeps a leading "//" (POSIX allows it)
    protocol = _PROTOCOL_ALIASES.get(protocol, protocol)
    path = re.sub("/{2,}", "/", path)
    return f"{protocol}://{path.rstrip('/') or path}"


_PROTOCOL_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}


def scheme_of(url: str) -> str:
    """The protocol a URL names ("file" for a plain path), without opening anything."""
    return split_protocol(url)[0] or "file"


def is_local(fs) -> bool:
    """Whether an fsspec filesystem is the local disk (links, renames and fsync work there)."""
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return proto in ("file", "local")


def options_from_env(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """Explicit options win; for s3:// the standard AWS_ENDPOINT_URL, AWS_REGION and
    AWS_MAX_ATTEMPTS fill the gaps.

    Keys and secrets are left to botocore's own credential chain (AWS_ACCESS_KEY_ID, profiles,
    instance roles), so they never pass through, or get logged by, this code.
    """
    options = dict(storage_options or {})
    if not url.startswith(("s3://", "s3a://")):
        return options
    # One retry policy: botocore's adaptive mode (back-off with jitter, and a client-side rate
    # limit once S3 throttles). s3fs's own retry loop is switched off in Storage, and callers add
    # none of their own around a request, so a throttled request is never retried n x m times.
    config = dict(options.get("config_kwargs") or {})
    # botocore's `max_attempts` counts retries; `total_max_attempts` counts requests, as the
    # standard AWS_MAX_ATTEMPTS does, which sets it when no option does.
    raw = os.environ.get("AWS_MAX_ATTEMPTS")
    attempts = POLICY.s3_max_attempts
    if raw:
        if not raw.strip().isdigit() or int(raw) < 1:
            raise StorageError(f"AWS_MAX_ATTEMPTS={raw!r}: not a number of requests (1 or more)", url)
        attempts = int(raw)
    config.setdefault("retries", {"mode": "adaptive", "total_max_attempts": attempts})
    options["config_kwargs"] = config
    client_kwargs = dict(options.get("client_kwargs") or {})
    for env, name in (("AWS_ENDPOINT_URL", "endpoint_url"), ("AWS_REGION", "region_name")):
        if os.environ.get(env) and name not in client_kwargs and name not in options:
            client_kwargs[name] = os.environ[env]
    if client_kwargs:
        options["client_kwargs"] = client_kwargs
    return options


@contextmanager
def _failing(what: str, where: str, vanished: str | None = None) -> Iterator[None]:
    """What fsspec and botocore raise, as the one error the core handles: a StorageError naming the
    path (`<what> failed: <why>`, or `vanished` for a file a listing named that is gone). A caller
    that expects a missing file catches FileNotFoundError inside the block."""
    try:
        yield
    except FileNotFoundError as exc:
        raise StorageError(vanished or f"{what} failed: {exc}", where) from exc
    except OSError as exc:
        raise StorageError(f"{what} failed: {exc}", where) from exc


def _write_error(exc: OSError, target: str) -> Exception:
    """A conditional write the store refused (412, or 409 for a concurrent conditional write) is
    FileExistsError; anything else a StorageError."""
    text = str(exc).lower()
    response = getattr(exc.__cause__, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", "")).lower()
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if status in (409, 412) or "precondition" in code + text or "pre-condition" in text:
        return FileExistsError(target)
    return StorageError(f"write failed: {exc}", target)


class Storage:
    """The files of one checkpoint root."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        self.url = normalize_url(url)
        try:
            self.fs, root = url_to_fs(self.url, **options_from_env(self.url, storage_options))
        except (ValueError, ImportError) as exc:
            raise StorageError(f"cannot open storage: {exc}", url) from exc
        self.root = root.rstrip("/")
        self.calls = Calls()
        self._one_retry_policy()

    def _one_retry_policy(self) -> None:
        if self.protocol == "s3":
            self.fs.retries = 1  # s3fs's loop would retry on top of botocore's: one attempt from it

    def child(self, rel: str) -> Storage:
        """The storage of a folder below this root, sharing the filesystem (and its connections)."""
        rel = "/".join(p for p in rel.split("/") if p)
        if any(p in (".", "..") for p in rel.split("/")):
            raise StorageError("a path below a root may not contain '.' or '..'", f"{self.url}/{rel}")
        return self._sibling(self.full(rel), f"{self.url}/{rel}" if rel else self.url, self.calls)

    def resolved(self) -> Storage:
        """This root as the file system finds it, for an identity (the maintenance lease): on a
        local disk symlinks resolved (`/x/alias/q` with alias -> real is `/x/real/q`), and the
        spelling lower-cased where the file system ignores case; an object store's URL is one
        spelling already."""
        if not self.is_local:
            return self
        real = os.path.realpath(self.root)
        if _ignores_case(real):
            real = real.lower()
        return self._sibling(real, real, self.calls)

    def parent(self) -> Storage:
        """The storage of the folder that holds this root (same filesystem and credentials)."""
        if self.is_local:
            return self._sibling(os.path.dirname(self.root) or "/", os.path.dirname(self.url) or "/")
        if "/" not in self.root:
            raise StorageError("a checkpoint at the top of a bucket has no folder beside it", self.url)
        return self._sibling(self.root.rpartition("/")[0], self.url.rpartition("/")[0])

    def _sibling(self, root: str, url: str, calls: Calls | None = None) -> Storage:
        sub = object.__new__(Storage)
        sub.fs, sub.root, sub.url = self.fs, root, url
        sub.calls = calls if calls is not None else Calls()  # what a checkpoint costs excludes its lease
        return sub

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to Spark tasks and planning workers: the filesystem pickles by its arguments; the
        # counter stays here.
        return {"fs": self.fs, "root": self.root, "url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.calls = Calls()
        # A filesystem unpickled in another process is built anew from its arguments, and the
        # attribute set on it above is not one of them.
        self._one_retry_policy()

    @property
    def protocol(self) -> str:
        proto = self.fs.protocol
        return proto if isinstance(proto, str) else proto[0]

    def full(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def list_files(self, under: str = "") -> list[FileInfo]:
        """Every file under the root (or under the folder `under` of it), from one recursive listing.

        On object stores `find` is a flat prefix listing, so no per-directory walk and no HEAD per
        object. A missing root is an error, never an empty checkpoint; a missing `under` is empty.
        """
        top = self.full(under)
        # fsspec caches listings per filesystem instance, and instances are shared: a listing must
        # see deletions and new commits made since the last one.
        self.fs.invalidate_cache(top)
        self.calls.add("list")
        if not under:
            log.info("%s: listing every file", self.url)
        prefix = self.root + "/"
        with _failing("listing", top):
            try:
                if self.is_local:
                    files = _walk_local(top, len(prefix))
                else:
                    try:
                        found = self.fs.find(top, withdirs=False, detail=True)
                    finally:
                        self._forget_listings(top)
                    files = _found_files(found, prefix, top, under)
            except FileNotFoundError as exc:
                if under:
                    return []
                raise NotACheckpointError("no such file or directory", self.url) from exc
        if not files and not under and not self._is_dir():
            raise NotACheckpointError("no such directory", self.url)
        files.sort(key=lambda f: f.rel)
        return files

    def _forget_listings(self, top: str) -> None:
        """Drops what fsspec's listings cache holds of the tree under `top`. s3fs's `find` keeps
        every entry it lists there, for each folder of the tree, and never lets go: a plan listing
        partition after partition would hold the whole checkpoint by its end (1.6 MB of RSS per
        thousand objects). Nothing here reads that cache: a read is given its size (`open`).
        Threads listing disjoint trees drop disjoint keys (the cache iterates over a copy)."""
        cache = getattr(self.fs, "dircache", None)
        if cache:
            inside = top + "/"
            for key in [k for k in cache if k == top or k.startswith(inside)]:
                cache.pop(key, None)

    def list_tree(
        self, split: Callable[[Storage], list[str]], workers: int = POLICY.list_workers
    ) -> list[FileInfo]:
        """Every file under the root, as `list_files` gives it, listed as several prefixes at once.

        `split` names disjoint folders that together with the files outside them cover the root
        (cleanup planning passes one folder per state partition); each is listed by its own
        recursive listing, concurrently, and the rest by one listing that skips them. On S3 the
        wall time then falls with the number of folders. Any failure fails the whole listing.
        """
        folders = sorted(set(split(self)))
        if not folders:
            return self.list_files()
        seen = 0
        lock = threading.Lock()

        def one(folder: str) -> list[FileInfo]:
            nonlocal seen
            got = self.list_files(folder)
            with lock:
                before, seen = seen, seen + len(got)
                if seen // _PROGRESS_EVERY > before // _PROGRESS_EVERY:
                    report(
                        log,
                        Progress("files listed", seen, None),
                        "%s: listed %d files in %d requests",
                        self.url,
                        seen,
                        self.calls.total(),
                    )
            return got

        with ThreadPoolExecutor(max(1, min(workers, len(folders)))) as pool:
            parts = list(pool.map(one, folders))
        inside = tuple(f + "/" for f in folders)
        rest = [f for f in self.list_outside(folders) if not f.rel.startswith(inside)]
        files = rest + [f for part in parts for f in part]
        files.sort(key=lambda f: f.rel)
        return files

    def list_outside(self, folders: list[str]) -> list[FileInfo]:
        """The files of the root outside `folders`: a walk of shallow listings that skips them."""
        skip, out, todo = set(folders), list[FileInfo](), [""]
        while todo:
            rel = todo.pop()
            listing = self.list_dir(rel)
            if not listing.exists and not rel:
                raise NotACheckpointError("no such directory", self.url)
            out += listing.files
            todo += [d for d in listing.folders if d not in skip]
        return out

    def list_dir(self, rel: str = "") -> Folder:
        """The files directly in one folder and its subfolders: one delimiter listing on S3.

        A folder that does not exist lists as empty with `exists` False; the caller decides whether
        that is an error.
        """
        top = self.full(rel)
        self.calls.add("list_dir")
        if self.protocol == "s3":
            return self._list_dir_s3(rel)
        self.fs.invalidate_cache(top)
        with _failing("listing", top):
            try:
                entries = self.fs.ls(top, detail=True)
            except FileNotFoundError:
                return Folder((), (), False)
        prefix, inside = self.root + "/", top + "/"
        files, folders = [], []
        for entry in entries:
            name = entry["name"].rstrip("/")
            if not name.startswith(inside):
                continue  # a file given as the folder lists as itself
            child = name[len(prefix) :]
            if entry.get("type") == "directory":
                folders.append(child)
            else:
                files.append(FileInfo(child, int(entry.get("size") or 0), mtime_of(entry)))
        return Folder(tuple(sorted(files, key=lambda f: f.rel)), tuple(sorted(folders)), True)

    def _list_dir_s3(self, rel: str) -> Folder:
        # ListObjectsV2 with a delimiter, page by page: s3fs's ls() lists the parent as well when a
        # folder is empty (to tell a file from a folder), which would double an idle sensor tick.
        top = self.full(rel)
        bucket, _, key = top.partition("/")
        prefix = f"{key}/" if key else ""
        base = len(self.root) + 1
        files, folders, token = [], [], None
        with _failing("listing", top):
            while True:
                page = self.fs.call_s3(
                    "list_objects_v2", Bucket=bucket, Prefix=prefix, Delimiter="/",
                    **({"ContinuationToken": token} if token else {}),
                )  # fmt: skip
                subs = page.get("CommonPrefixes", [])
                folders += [f"{bucket}/{p['Prefix']}".rstrip("/")[base:] for p in subs]
                files += [FileInfo(f"{bucket}/{o['Key']}"[base:], int(o.get("Size") or 0), mtime_of(o))
                          for o in page.get("Contents", []) if o["Key"] != prefix]  # fmt: skip
                if not page.get("IsTruncated"):
                    break
                token = page["NextContinuationToken"]
        files.sort(key=lambda f: f.rel)
        return Folder(tuple(files), tuple(sorted(folders)), bool(files or folders))

    @property
    def _one_get(self) -> dict[str, Any]:
        # s3fs reads a whole object in parallel ranges, after a HEAD for its size (and a LIST when
        # the key is missing): one GET is what a small file should cost.
        return {"max_concurrency": 1} if self.protocol == "s3" else {}

    def stat(self, rel: str) -> FileInfo | None:
        """Size and mtime of one file (one HEAD on S3); None when it does not exist or is a folder."""
        self.calls.add("stat")
        if self.protocol == "s3":
            return self._stat_s3(rel)
        with _failing("stat", self.full(rel)):
            try:
                entry = self.fs.info(self.full(rel))
            except FileNotFoundError:
                return None
        if entry.get("type") == "directory":
            return None
        return FileInfo(rel, int(entry.get("size") or 0), mtime_of(entry))

    def _stat_s3(self, rel: str) -> FileInfo | None:
        # s3fs's info() answers a missing key with a LIST for a "directory" of that name: a plain
        # HEAD says all a stat needs.
        bucket, _, key = self.full(rel).partition("/")
        with _failing("stat", self.full(rel)):
            try:
                head = self.fs.call_s3("head_object", Bucket=bucket, Key=key)
            except FileNotFoundError:
                return None
        return FileInfo(rel, int(head.get("ContentLength") or 0), mtime_of(head))

    def read_if_exists(self, rel: str) -> bytes | None:
        """A whole file, or None when it does not exist: one GET, so a probe and its read are one."""
        self.calls.add("read")
        with _failing("read", self.full(rel)):
            try:
                return self.fs.cat_file(self.full(rel), **self._one_get)
            except (FileNotFoundError, IsADirectoryError):
                return None

    def _is_dir(self) -> bool:
        try:
            return bool(self.fs.isdir(self.root))
        except OSError:
            return False

    def read_bytes(self, rel: str, start: int | None = None, end: int | None = None) -> bytes:
        """A whole file, or the bytes from `start` to `end` (offsets from its start)."""
        self.calls.add("read")
        full = self.full(rel)
        with _failing("read", full, vanished=_VANISHED):
            if self.is_local:
                # Python's own file, as in `open`: fsspec's local cat_file costs twice as much a
                # call (21 µs against 11 µs for a lineage header's first block).
                with open(full, "rb") as f:
                    f.seek(start or 0)
                    return f.read() if end is None else f.read(end - (start or 0))
            return self.fs.cat_file(full, start=start, end=end, **self._one_get)

    def download(
        self, rel: str, dest: str, size: int | None = None, chunk: int = POLICY.copy_chunk_bytes
    ) -> tuple[int, int]:
        """Copies a file to local disk one chunk at a time and returns (bytes, CRC32C) of what was
        written: memory is one chunk whatever the file's size. On object stores each chunk is one
        ranged GET (`size`, when known, spares a HEAD); a file shorter or longer than `size` fails."""
        import crc32c

        full = self.full(rel)
        if (size is None or size == 0) and not self.is_local:  # S3 refuses a range of an empty object
            found = self.stat(rel)
            if found is None:
                raise StorageError(_VANISHED, full)
            size = found.size
        crc, done = 0, 0
        with _failing("download", full, vanished=_VANISHED), open(dest, "wb") as out:
            if self.is_local:  # one open file, read sequentially
                self.calls.add("read")
                with self.fs.open(full, "rb") as src:
                    while block := src.read(chunk):
                        crc, done = crc32c.crc32c(block, crc), done + out.write(block)
            else:
                # The last range asks one byte past the expected end: a longer file shows
                # without a HEAD. An empty file needs no GET: its size said all.
                assert size is not None  # stat above when it was not given
                while done < size:
                    self.calls.add("read")
                    end = min(done + chunk, size + 1)
                    block = self.fs.cat_file(full, start=done, end=end, **self._one_get)
                    crc, done = crc32c.crc32c(block, crc), done + out.write(block)
                    if done < end:
                        break
        if size is not None and done != size:
            raise StorageError(f"read {done} bytes where {size} were expected", full)
        return done, crc

    def read_many(self, rels: Iterable[str]) -> dict[str, bytes]:
        """Whole small files, fetched concurrently where the backend is asynchronous."""
        rels = list(rels)
        if not rels:
            return {}
        paths = [self.full(r) for r in rels]
        self.calls.add("read", len(paths))
        with _failing("read", self.url):
            try:
                got = self.fs.cat(paths, on_error="raise", **self._one_get)
            except FileNotFoundError as exc:  # which of them: the error names it
                raise StorageError(f"{_VANISHED}: {exc}", self.url) from exc
        if len(paths) == 1 and isinstance(got, (bytes, bytearray)):
            got = {paths[0]: got}
        by_path = {self.fs._strip_protocol(k).rstrip("/"): v for k, v in got.items()}
        return {rel: by_path[self.fs._strip_protocol(path)] for rel, path in zip(rels, paths, strict=True)}

    def read_heads(self, files: Iterable[FileInfo], length: int) -> Iterator[bytes]:
        """The first `length` bytes of each file (the whole file when shorter), in the order given;
        a file listed as empty is b"" with no read (S3 refuses a range of an empty object).

        Files are read a chunk at a time and only one chunk's bytes are held. On object stores a
        chunk is fetched at once, one ranged GET each (the listed size bounds the range: no HEAD),
        so a hundred lineage headers wait for a few round trips rather than a hundred, and skip
        what s3fs spends on a file object per read. Locally a chunk's files are opened and hinted
        to the kernel, then read (`_local_heads`), all before the caller decodes any. A file that
        is gone raises `file vanished`, naming it."""
        chunk: list[FileInfo] = []
        for info in files:
            chunk.append(info)
            if len(chunk) == _HEADS_AT_ONCE:
                yield from self._fetch_heads(chunk, length)
                chunk = []
        yield from self._fetch_heads(chunk, length)

    def _fetch_heads(self, infos: list[FileInfo], length: int) -> Iterator[bytes]:
        asked = [i for i in infos if i.size > 0]
        self.calls.add("read", len(asked))
        paths, ends = [self.full(i.rel) for i in asked], [min(length, i.size) for i in asked]
        if self.is_local:
            got = iter(_local_heads(paths, ends))
        else:
            got = iter(self.fs.cat_ranges(paths, 0, ends, on_error="return") if asked else [])
        for info in infos:
            head = next(got) if info.size > 0 else b""
            if isinstance(head, BaseException):
                with _failing("read", self.full(info.rel), vanished=_VANISHED):
                    raise head
            yield head

    # Writing. Nothing here overwrites unless asked to: `write` is for this tool's own files (plans,
    # outcomes), `write_if_absent` for anything inside a checkpoint.

    def write(self, rel: str, data: bytes) -> None:
        """Creates or replaces one of this tool's own files (a plan): never a checkpoint's."""
        self._write_with(self.fs.pipe_file, rel, data, "write")

    def write_if_absent(self, rel: str, data: bytes, temp_prefix: str) -> str | None:
        """Writes a whole new file atomically, or raises FileExistsError; never overwrites. Returns
        the object's ETag on object stores (for `replace_own`), else None.

        S3: one PutObject with `If-None-Match: *`, sent by this code rather than left to s3fs (which
        ignored its `mode="create"` before 2024.12), so the object appears whole or not at all and
        the store itself refuses to replace one, with no window between check and write.
        Local: a temp file named `<temp_prefix><name>.<hex>.tmp` (so a crash leaves a file cleanup
        recognises), fsynced, then hard-linked into place, which fails if the target exists.
        """
        self.calls.add("write")
        target = self.full(rel)
        if self.protocol == "s3":
            return self._put_s3(target, data, IfNoneMatch="*")
        if not self.is_local:
            try:
                self.fs.pipe_file(target, data, mode="create")
            except FileExistsError:
                raise
            except OSError as exc:
                raise _write_error(exc, target) from exc
            return None

        def fill(temp: str) -> None:
            with open(temp, "wb") as f:
                f.write(data)

        _link_into_place(target, temp_prefix, fill)
        return None

    def now(self, folder: str, temp_prefix: str) -> float | None:
        """Now by the clock that stamps this storage's mtimes (the object store's, the file
        server's, the kernel's): the mtime of an empty probe written into `folder`, then removed.
        None when the backend keeps no mtimes. Two hosts that compare ages on this one clock need
        not trust each other's (the lease's takeover)."""
        rel = f"{folder}/{temp_prefix}clock.{uuid.uuid4().hex}.tmp"
        self.write_if_absent(rel, b"", temp_prefix)
        try:
            probe = self.stat(rel)
        finally:
            self.delete_batch([rel])
        return probe.mtime if probe else None

    def replace_own(self, rel: str, data: bytes, etag: str | None, temp_prefix: str) -> str | None:
        """Replaces a small file of this tool's own that only its writer changes (a lease
        generation) atomically; returns the new ETag on S3. S3: a conditional PUT `If-Match` on
        `etag`, so a file someone else rewrote or removed raises FileExistsError. Local: a temp
        file renamed over it, so a reader sees the old bytes or the new, never a part."""
        self.calls.add("write")
        target = self.full(rel)
        if self.protocol == "s3":
            return self._put_s3(target, data, **({"IfMatch": etag} if etag else {}))
        if not self.is_local:
            self._write_with(self.fs.pipe_file, rel, data, "write")
            return None
        folder, name = os.path.split(target)
        temp = os.path.join(folder, f"{temp_prefix}{name}.{uuid.uuid4().hex}.tmp")
        try:
            with _failing("write", target), open(temp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            with _failing("write", target):
                os.replace(temp, target)
        finally:
            if os.path.lexists(temp):
                os.unlink(temp)
        return None

    def _put_s3(self, target: str, data: bytes, **condition: str) -> str | None:
        bucket, _, key = target.partition("/")
        try:
            got = self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
        except FileNotFoundError as exc:
            if "IfMatch" in condition:  # the object it was to replace is gone: someone removed it
                raise FileExistsError(target) from exc
            raise StorageError(f"write failed: {exc}", target) from exc  # no such bucket
        except OSError as exc:
            raise _write_error(exc, target) from exc
        finally:
            self.fs.invalidate_cache(target.rsplit("/", 1)[0])
        return got.get("ETag")

    def copy_to(self, rel: str, dest: Storage, dest_rel: str, size: int, temp_prefix: str) -> int | None:
        """Copies one file to a new name in `dest` (another root, any backend) without overwriting;
        returns the CRC32C of the bytes copied, or None when they never passed through here.

        S3 to S3 through one filesystem (same endpoint and credentials): a server-side CopyObject,
        no byte downloaded. Otherwise streamed through `download` (one chunk in memory, CRC32C
        on the way): into a temp file beside the target that is then hard-linked into place on a
        local `dest` (so a crash never leaves a partial file under the real name), or into a local
        temp file that is uploaded whole to an object store.
        """
        if self.protocol == "s3" and dest.fs is self.fs:
            self._copy_s3(rel, dest.full(dest_rel), size)
            return None
        if dest.is_local:
            dest.calls.add("write")
            _, crc = _link_into_place(
                dest.full(dest_rel), temp_prefix, lambda temp: self.download(rel, temp, size)
            )
            return crc
        with tempfile.TemporaryDirectory(prefix=temp_prefix) as tmp:
            local = os.path.join(tmp, "copy")
            _, crc = self.download(rel, local, size)
            dest.put_file(local, dest_rel)
        return crc

    def link_to(self, rel: str, dest: Storage, dest_rel: str) -> bool:
        """Gives a local file a second name in a local `dest` (a hard link: no byte copied); False
        when the two cannot share it (another file system, a store without hard links, an object
        store), and the caller copies. Only for files nothing rewrites in place, as Spark's state
        and log files: a link is the same bytes, so a change to one would be a change to both."""
        if not (self.is_local and dest.is_local):
            return False
        target = dest.full(dest_rel)
        dest.calls.add("write")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(self.full(rel), target)
            _fsync(os.path.dirname(target))
        except FileExistsError:
            raise
        except FileNotFoundError as exc:
            raise StorageError(_VANISHED, self.full(rel)) from exc
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                return False
            raise _write_error(exc, target) from exc
        return True

    def _copy_s3(self, rel: str, target: str, size: int) -> None:
        self.calls.add("copy")
        source = self.full(rel)
        with _failing("server-side copy", source, vanished="file vanished while copying"):
            if size < _COPY_OBJECT_MAX:
                # One request: s3fs's copy() would HEAD the source first for a size we already know.
                src_bucket, _, src_key = source.partition("/")
                bucket, _, key = target.partition("/")
                self.fs.call_s3(
                    "copy_object", Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}
                )
            else:
                self.fs.copy(source, target)  # multipart copy, still server-side

    def put_file(self, local_path: str, rel: str, move: bool = False) -> None:
        """Uploads a local file under a new name, streamed from disk in chunks (multipart on S3).
        `move`: the local file is not needed afterwards, so on a local disk of the same file system
        it is renamed into place instead of copied (a cleanup manifest can be gigabytes)."""

        def put(target: str, path: str) -> None:
            if not (move and self.is_local and _renamed(path, target)):
                self.fs.put_file(path, target)
            if self.is_local:  # durable before anything that names it is published (an SST before its zip)
                _fsync(target)
                _fsync(os.path.dirname(target))

        self._write_with(put, rel, local_path, "upload")

    def _write_with(self, put, rel: str, what, verb: str) -> None:
        self.calls.add("write")
        target = self.full(rel)
        with _failing(verb, target):
            if self.is_local:  # object stores have no folders to make
                self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            put(target, what)

    def append(self, rel: str, data: bytes) -> str:
        """Appends to one of this tool's own logs; returns the path written.

        Local files are appended to and fsynced. Object stores have no append: each call writes its
        own part `<rel>.<ns>` (nanoseconds, so parts sort in order) and returns that part's path.
        """
        self.calls.add("write")
        target = self.full(rel)
        with _failing("append", target):
            if self.is_local:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "ab") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                return target
            part = f"{target}.{time.time_ns()}"
            self.fs.pipe_file(part, data)
            return part

    def delete_batch(self, rels: list[str]) -> dict[str, str]:
        """Deletes files in one request where the store has bulk delete; returns {rel: why} of the
        files that were not deleted. A file already gone counts as deleted.

        S3: one DeleteObjects (at most 1000 keys, sent with Quiet=false) read key by key, since S3
        answers 200 even when some keys failed; a key the response names neither as deleted nor as
        failed is a failure, so nothing is reported deleted on faith. Errors keep S3's code first
        (`SlowDown: ...`) so the caller can tell what is worth another try. A request that fails as
        a whole raises. Elsewhere: one delete per file, then a check that it is gone.
        """
        if not rels:
            return {}
        self.calls.add("delete")
        try:
            if self.protocol == "s3":
                return self._delete_s3(rels)
            return self._delete_each(rels)
        finally:
            self.fs.invalidate_cache(self.root)

    def _delete_s3(self, rels: list[str]) -> dict[str, str]:
        if len(rels) > DELETE_MAX_KEYS:
            raise ValueError(f"DeleteObjects takes at most {DELETE_MAX_KEYS} keys")
        bucket, _, prefix = self.root.partition("/")
        key_of = {f"{prefix}/{rel}" if prefix else rel: rel for rel in rels}
        request = {"Objects": [{"Key": k} for k in key_of], "Quiet": False}
        try:
            response = self.fs.call_s3("delete_objects", Bucket=bucket, Delete=request)
        except OSError as exc:
            # s3fs turns S3's error into an errno (SlowDown becomes EBUSY): name S3's code again.
            code = getattr(exc.__cause__, "response", {}).get("Error", {}).get("Code")
            raise StorageError(
                f"DeleteObjects failed: {code or type(exc).__name__}: {exc}", self.root
            ) from exc
        deleted = {d["Key"] for d in response.get("Deleted", [])}
        failed = {e["Key"]: f"{e.get('Code')}: {e.get('Message', '')}" for e in response.get("Errors", [])}
        missed = "neither deleted nor failed in the response"
        return {rel: failed.get(key, missed) for key, rel in key_of.items() if key not in deleted}

    def _delete_each(self, rels: list[str]) -> dict[str, str]:
        errors = {}
        for rel in rels:
            path = self.full(rel)
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                errors[rel] = f"{type(exc).__name__}: {exc}"
                continue
            if self.fs.exists(path):  # never report as deleted what is still there
                errors[rel] = "still present after the delete"
        return errors

    def remove_empty_folders(self, rels: Iterable[str]) -> None:
        """Removes each folder that holds nothing, deepest first, and its emptied parents up to the
        root. Object stores have no folders: nothing to do."""
        if not self.is_local:
            return
        for rel in sorted(set(rels), key=lambda r: -r.count("/")):
            while rel:
                try:
                    os.rmdir(self.full(rel))
                except OSError:  # not empty, or gone: either way it is not ours to remove
                    break
                rel = rel.rpartition("/")[0]

    def outside(self, files: Iterable[FileInfo], folder: str) -> dict[str, str]:
        """{rel: where it really is} for each file that does not resolve inside `folder` of this root.

        Object stores have no links, so a clean relative path is where it says. On local disks each
        path is resolved (symlinks in any component, the file's own included); a file the listing
        did not call a link is not asked again.
        """
        if not self.is_local:
            return {}
        top = os.path.realpath(self.full(folder)) + os.sep
        # A file the listing did not call a link is where its folder really is: one realpath per
        # folder, not per file (cleanup guards 10^4-10^5 candidates per partition).
        resolved: dict[str, str] = {}
        out = {}
        for f in files:
            rel = f.rel
            if f.link or (f.link is None and os.path.islink(self.full(rel))):
                real = os.path.realpath(self.full(rel))
            else:
                parent, _, name = rel.rpartition("/")
                where = resolved.get(parent)
                if where is None:
                    where = resolved[parent] = os.path.realpath(self.full(parent)) + os.sep
                if where.startswith(top):
                    continue
                real = where + name
            if not real.startswith(top):
                out[rel] = real
        return out

    @property
    def is_local(self) -> bool:
        return is_local(self.fs)

    def s3_connection(self) -> dict[str, str | None]:
        """Where and as whom this S3 root is reached (endpoint, region, and the credentials only
        when they were given as options; None leaves them to the standard chain), so that an engine
        with its own client (Spark's s3a) reaches the same objects as this code does."""
        if self.protocol != "s3":
            raise ValueError(f"not an S3 root: {self.url}")
        kwargs = getattr(self.fs, "client_kwargs", None) or {}
        return {
            "bucket": self.root.partition("/")[0],
            "endpoint": kwargs.get("endpoint_url") or getattr(self.fs, "endpoint_url", None),
            "region": kwargs.get("region_name"),
            "key": getattr(self.fs, "key", None),
            "secret": getattr(self.fs, "secret", None),
            "token": getattr(self.fs, "token", None),
        }

    @property
    def spark_url(self) -> str:
        """The root as Spark qualifies it in the paths it records (operator metadata v2): `file:/...`
        on local disk, `s3a://bucket/...` on S3 (Hadoop's connector), `<protocol>://...` elsewhere."""
        if self.is_local:
            return f"file:{self.root}"
        return f"{'s3a' if self.protocol == 's3' else self.protocol}://{self.root}"

    def open(self, rel: str, block_size: int | None = None, size: int | None = None):
        """A buffered reader. On object stores `block_size` is how much each request reads ahead,
        and `size` (known from the listing) spares a HEAD request."""
        self.calls.add("open")
        full = self.full(rel)
        with _failing("open", full, vanished=_VANISHED):
            if self.is_local:
                # Python's own buffered file, not fsspec's wrapper (a third of the cost of opening),
                # with its default buffer: a local read costs a system call, not a request, and a
                # buffer of `block_size` (128 KiB for a lineage header) is a fresh mapping of memory
                # per open, four times the cost of the read. Cleanup opens a header per retained
                # batch and partition.
                return open(full, "rb")
            if size is None:
                return self.fs.open(full, "rb", block_size=block_size)
            f = self.fs.open(full, "rb", block_size=block_size, size=size)
            if isinstance(f, AbstractBufferedFile):
                # s3fs takes the size but still asks for the object's details at its first read: a
                # HEAD before each GET, unless a cached listing names the file. The size is all.
                f.details = {"name": full, "size": size, "type": "file"}
            return f
