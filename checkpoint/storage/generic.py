"""Any fsspec protocol through fsspec's generic calls: what a backend does when nothing better is
known of it (memory, GCS, Azure, HDFS...). The local and S3 backends start from this one."""

from __future__ import annotations

import io
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, TypeVar

from fsspec.spec import AbstractBufferedFile

from checkpoint.errors import OversizedFileError, StorageError, UnprovenStorageError
from checkpoint.storage.backend import Backend
from checkpoint.storage.files import (
    VANISHED,
    Calls,
    FileInfo,
    Folder,
    failing,
    found_files,
    http_status,
    mtime_of,
    write_error,
)

T = TypeVar("T")


def _unsatisfiable(exc: BaseException) -> bool:
    """A ranged read from byte 0 the store refused as unsatisfiable: the object is empty (HTTP
    416, which S3 and Azure name InvalidRange). Told by the status the store answered, never by
    the message, which holds the path (a name with `416` in it is no empty object)."""
    response = getattr(exc.__cause__, "response", None)  # botocore's error, under s3fs'
    if isinstance(response, dict) and response.get("Error", {}).get("Code") == "InvalidRange":
        return True
    return http_status(exc) == 416


class FsspecBackend:
    """fsspec's calls, shared by every backend. A new file's upload (`put_new`) and a delete are
    each backend's own: fsspec's generic calls can only check, then act, and leave the window."""

    latency_bound = True
    appends = False
    hidden_checksums = False
    account: str | None = None

    def __init__(self, fs: Any):
        self.fs = fs

    def __getstate__(self) -> dict[str, Any]:
        return {"fs": self.fs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fs"])  # type: ignore[misc]  # a backend's set-up holds for an unpickled fs too

    @property
    def protocol(self) -> str:
        proto = self.fs.protocol
        return proto if isinstance(proto, str) else proto[0]

    @property
    def _one_get(self) -> dict[str, Any]:
        return {}

    def find(self, top: str, prefix: str) -> list[FileInfo]:
        try:
            found = self.fs.find(top, withdirs=False, detail=True)
        finally:
            self._forget_listings(top)
        if not isinstance(found, dict):  # adlfs finds a lone blob given as the folder as a list
            found = {}
        return found_files(found, prefix, top)

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

    def pages(self, top: str, prefix: str, page: int) -> Iterator[list[FileInfo]]:
        """A walk of shallow listings, depth first, each folder's files and subfolders merged in
        order of path (a folder's own paths all start with `<folder>/`), so that what it yields is
        in the order a sorted `find` has: memory for one folder per level, never the tree. On S3 too
        (a delimiter listing a folder, page by page), rather than the flat listing's pages: not
        every store lists keys in their order (SeaweedFS lists `commits/9` before `commits.bak`),
        and a caller writes what it yields in order."""
        # each level: its entries still to visit, as (sort key, file or None, folder's full path)
        stack = [iter(self._entries(top, prefix))]
        out: list[FileInfo] = []
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            _, file, folder = entry
            if file is not None:
                out.append(file)
                if len(out) >= page:
                    yield out
                    out = []
            else:
                stack.append(iter(self._entries(folder, prefix)))
        if out:
            yield out

    def _entries(self, top: str, prefix: str) -> list[tuple[str, FileInfo | None, str]]:
        found = self.ls(top, prefix)
        entries: list[tuple[str, FileInfo | None, str]] = [(f.rel, f, "") for f in found.files]
        for d in found.folders:
            # An S3 key with an empty part (`state/0/1//x`) lists its folder as a child of itself:
            # walked, it would be listed again and again, for ever.
            if not (prefix + d).startswith(top + "/") or (prefix + d).rstrip("/") == top:
                raise StorageError(f"a folder that lists as inside itself: {d!r}", top)
            entries.append((d + "/", None, prefix + d))
        entries.sort(key=lambda e: e[0])
        return entries

    def ls(self, top: str, prefix: str) -> Folder:
        self.fs.invalidate_cache(top)
        try:
            entries = self.fs.ls(top, detail=True)
        except FileNotFoundError:
            return Folder((), (), False)
        finally:
            self._forget_listings(top)  # a walk must not leave every folder's listing cached
        inside = top + "/"
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

    def is_dir(self, path: str) -> bool:
        try:
            return bool(self.fs.isdir(path))
        except OSError:
            return False

    def fence(self, root: str) -> str | None:
        """No links on object stores: a clean relative path is where it says."""
        return None

    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None:
        try:
            entry = self.fs.info(path)
        except FileNotFoundError:
            return None
        if entry.get("type") == "directory":
            return None
        return FileInfo(rel, int(entry.get("size") or 0), mtime_of(entry))

    def cat(self, path: str, start: int, end: int, fence: str | None = None) -> bytes:
        return self.fs.cat_file(path, start=start, end=end, **self._one_get)

    def cat_bounded(self, path: str, limit: int, fence: str | None = None) -> bytes:
        """One ranged GET of the bound plus one byte: the store sends no more, whatever the
        object's size. A range of an empty object is refused by the store (S3's InvalidRange),
        and an empty object is what that refusal means."""
        try:
            data = self.fs.cat_file(path, start=0, end=limit + 1, **self._one_get)
        except Exception as exc:
            if not _unsatisfiable(exc):
                raise
            return b""
        if len(data) > limit:
            raise OversizedFileError(f"more than the {limit} bytes a file of its kind holds: not read", path)
        return data

    def cat_many(self, paths: list[str], fence: str | None, limit: int) -> dict[str, bytes]:
        # Ranged GETs side by side: fsspec's async cat_ranges, one request each.
        got = self.fs.cat_ranges(paths, [0] * len(paths), [limit + 1] * len(paths), on_error="return")
        out: dict[str, bytes] = {}
        for path, data in zip(paths, got, strict=True):
            if isinstance(data, BaseException) and _unsatisfiable(data):
                data = b""
            elif isinstance(data, BaseException):
                raise data
            if len(data) > limit:
                raise OversizedFileError(
                    f"more than the {limit} bytes a file of its kind holds: not read", path
                )
            out[path] = data
        return out

    def heads(
        self, paths: list[str], ends: list[int], fence: str | None = None
    ) -> list[bytes | BaseException]:
        return self.fs.cat_ranges(paths, 0, ends, on_error="return") if paths else []

    def download(
        self, path: str, out: BinaryIO, size: int | None, chunk: int, calls: Calls, fence: str | None = None
    ) -> tuple[int, int]:
        """One ranged GET per chunk. The last range asks one byte past the expected end, so a
        longer file shows without a HEAD; an unknown size (or 0: a range of an empty object is
        refused) costs one stat first."""
        import crc32c

        if not size:
            calls.add("stat")
            found = self.stat(path, "")
            if found is None:
                raise FileNotFoundError(path)
            size = found.size
        crc, done = 0, 0
        while done < size:
            calls.add("read")
            end = min(done + chunk, size + 1)
            block = self.fs.cat_file(path, start=done, end=end, **self._one_get)
            crc, done = crc32c.crc32c(block, crc), done + out.write(block)
            if done < end:
                break
        return done, crc

    def open(self, path: str, block_size: int | None, size: int | None, fence: str | None = None) -> BinaryIO:
        if size is None:
            return self.fs.open(path, "rb", block_size=block_size)
        f = self.fs.open(path, "rb", block_size=block_size, size=size)
        if isinstance(f, AbstractBufferedFile):
            # s3fs takes the size but still asks for the object's details at its first read: a
            # HEAD before each GET, unless a cached listing names the file. The size is all.
            f.details = {"name": path, "size": size, "type": "file"}
        return f

    def write(self, target: str, data: bytes) -> None:
        self.fs.pipe_file(target, data)

    def write_new(self, target: str, data: bytes, temp_prefix: str) -> str | None:
        try:
            self.fs.pipe_file(target, data, mode="create")
        except FileExistsError:
            raise
        except OSError as exc:
            raise write_error(exc, target) from exc
        return None

    def replace(self, target: str, data: bytes, etag: str | None, temp_prefix: str) -> str | None:
        with failing("write", target):
            self.fs.pipe_file(target, data)
        return None

    def write_from(self, target: str, temp_prefix: str, fill: Callable[[str], T]) -> T:
        """Filled into a local temp file, then uploaded whole."""
        with tempfile.TemporaryDirectory(prefix=temp_prefix) as tmp:
            local = os.path.join(tmp, "copy")
            got = fill(local)
            with failing("upload", target):
                self.put_file(local, target, move=True)
        return got

    def put_file(self, local_path: str, target: str, *, move: bool) -> None:
        self.fs.put_file(local_path, target)

    def append(self, target: str, data: bytes) -> str:
        """No append on object stores: each call writes its own part `<target>.<ns>` (nanoseconds,
        so parts sort in order) and returns that part's path."""
        part = f"{target}.{time.time_ns()}"
        self.fs.pipe_file(part, data)
        return part

    def refuse_writes(self) -> None:
        """Writes are taken here (an unproven store refuses them)."""

    def copies_to(self, other: Backend) -> bool:
        return False

    def copy(self, source: str, target: str, size: int, calls: Calls) -> None:
        raise NotImplementedError("no server-side copy on this backend")

    def link(self, source: str, target: str, fence: str | None = None) -> bool:
        return False

    def folder_ids(self, full: Callable[[str], str], rels: Iterable[str]) -> dict[str, list[int]]:
        """Object stores have no folders: nothing to hold a delete to."""
        return {}

    def remove_empty_folders(
        self, full: Callable[[str], str], rels: Iterable[str], fence: str | None = None
    ) -> None:
        """Object stores have no folders: nothing to do."""

    def escapes(self, full: Callable[[str], str], folder: str, files: Iterable[FileInfo]) -> dict[str, str]:
        """No links on object stores: a clean relative path is where it says."""
        return {}

    def identity(self, root: str) -> str:
        return root  # an object store's key has one spelling already

    def spark_url(self, root: str) -> str:
        return f"{self.protocol}://{root}"


class UnprovenBackend(FsspecBackend):
    """A protocol no test here runs against, read through fsspec's generic calls with the user's
    leave (`--unproven-storage`) and never written: the lease, the audit trail and every
    published file rest on a refusal of an existing name that nobody has seen this store give,
    so every write is refused before a request is sent."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise UnprovenStorageError(
            f"{self.protocol}:// is not a proven store: read-only commands read it, nothing writes there"
        )

    write = write_new = replace = write_from = put_file = put_new = append = _refuse
    copy = link = delete = remove_empty_folders = refuse_writes = _refuse


class PreconditionBackend(FsspecBackend):
    """A store whose fsspec filesystem sends the store's own create-if-absent precondition for
    `mode="create"` and has a server-side copy and a DELETE that answers once the object is gone
    (Azure's adlfs, GCS's gcsfs: each proven by two writers racing, tests/checkpoint/storage/
    test_clouds.py). The generic backend trusts no such thing of a filesystem it has not seen.
    `write_new` is the generic one (`mode="create"`), here with the store's refusal behind it."""

    def put_new(self, local_path: str, target: str, temp_prefix: str) -> None:
        """`write_new` streamed from the file, in the store's blocks or chunks: the precondition
        is checked when the object is committed, so it appears whole or not at all."""
        try:
            self.fs.put_file(local_path, target, mode="create")
        except FileExistsError:
            raise
        except OSError as exc:
            raise write_error(exc, target) from exc

    def open(self, path: str, block_size: int | None, size: int | None, fence: str | None = None) -> BinaryIO:
        """A reader of ranged GETs, a block each, when the size is known (from a listing): gcsfs'
        file asks for the object's details (a metadata GET and a listing) when it opens, whatever
        size it is given, three requests before the first byte; adlfs' asks for the blob's
        properties (a HEAD: a changelog's header read on Azure was a HEAD and a GET)."""
        if size is None:
            return self.fs.open(path, "rb", block_size=block_size)
        raw = _Ranged(self.fs, path, size)
        return io.BufferedReader(raw, buffer_size=block_size or io.DEFAULT_BUFFER_SIZE)

    def copies_to(self, other: Backend) -> bool:
        return other.fs is self.fs  # one endpoint, one set of credentials

    def copy(self, source: str, target: str, size: int, calls: Calls) -> None:
        calls.add("copy")
        self.fs.cp_file(source, target)

    def delete(
        self,
        root: str,
        rels: list[str],
        fence: str | None = None,
        folders: dict[str, list[int]] | None = None,
    ) -> dict[str, str]:
        """One DELETE a file, `DELETES_AT_ONCE` in flight, each answered on its own: {rel: why}
        of the files not deleted, a file already gone counting as deleted."""
        got = self._deleted([self.fs._rm_file(f"{root}/{rel}") for rel in rels])
        return {rel: why for rel, why in zip(rels, got, strict=True) if why}

    def _deleted(self, deletes: list[Any]) -> list[str | None]:
        """Runs the deletes, `DELETES_AT_ONCE` in flight: why each one failed, None where it
        deleted, or found nothing to delete."""
        from fsspec.asyn import _run_coros_in_chunks, sync

        at_once = {"batch_size": DELETES_AT_ONCE, "return_exceptions": True}
        got = sync(self.fs.loop, _run_coros_in_chunks, deletes, **at_once)
        failed = (isinstance(r, BaseException) and not isinstance(r, FileNotFoundError) for r in got)
        return [f"{type(r).__name__}: {r}" if bad else None for r, bad in zip(got, failed, strict=True)]

    def remove_empty_folders(
        self, full: Callable[[str], str], rels: Iterable[str], fence: str | None = None
    ) -> None:
        """An object store has no folders, but Spark's GCS and Azure connectors mark each folder
        they make with an empty object (`_markers`). The markers of the folders among `rels` that
        hold nothing else are deleted, so that a deleted checkpoint leaves no tree of empty
        folders behind, which a listing (discovery's) would still show. A folder with any other
        object under it keeps its marker."""
        wanted = {full(rel).rstrip("/") for rel in rels}
        doomed: dict[int, list[str]] = {}  # by depth
        for top in sorted(p for p in wanted if not wanted.intersection(ancestors(p))):
            markers, held = self._markers(top)
            for folder, names in markers.items():
                if folder in wanted and folder not in held:
                    doomed.setdefault(folder.count("/"), []).extend(names)
        # A level at a time, the deepest first: where folders are real (a hierarchical namespace),
        # a folder goes only once its children have.
        for depth in sorted(doomed, reverse=True):
            failed = [why for why in self._delete_names(doomed[depth]) if why]
            if failed:
                raise StorageError(
                    f"{len(failed)} folder marker(s) not deleted, first: {failed[0]}", min(wanted)
                )

    def _markers(self, top: str) -> tuple[dict[str, list[str]], set[str]]:
        """The folder markers at and under the folder `top` ({folder: the names of its markers}),
        and the folders under it that hold something else."""
        markers: dict[str, list[str]] = {}
        held: set[str] = set()
        for name, marker in self._tree(top):
            if marker:
                markers.setdefault(name.rstrip("/"), []).append(name)  # `x` and `x/` may both be there
            else:
                held.update(ancestors(name))
        return markers, held

    def _tree(self, top: str) -> list[tuple[str, bool]]:
        """Every object at and under the folder `top`, by name, and whether it is a folder's marker.
        A backend whose connectors write no markers lists none here."""
        return []

    def _delete_names(self, names: list[str]) -> list[str | None]:
        """Deletes each of `names` (full names): why each one failed, None where it deleted."""
        return self._deleted([self.fs._rm_file(name) for name in names])


DELETES_AT_ONCE = 16


class _Ranged(io.RawIOBase):
    """An object of known size read by ranged GETs (`cat_file`), as far as each read asks. Its
    requests are sent at the reads, not at the open: their errors are the door's, as the open's
    (a file deleted since its listing is the same vanished file)."""

    def __init__(self, fs: Any, path: str, size: int) -> None:
        self._fs, self._path, self._size, self._at = fs, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence not in (io.SEEK_SET, io.SEEK_CUR, io.SEEK_END):
            raise ValueError(f"invalid whence ({whence})")
        at = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence] + offset
        if at < 0:  # as io.BytesIO: zipfile asks it of a damaged end record, and takes it as damage
            raise ValueError(f"negative seek value {at}")
        self._at = at
        return at

    def _get(self, end: int) -> bytes:
        with failing("read", self._path, vanished=VANISHED):
            data = self._fs.cat_file(self._path, start=self._at, end=end)
        if len(data) > end - self._at:  # a store that ignored the range
            raise StorageError(
                f"read failed: {len(data)} bytes answered a range of {end - self._at}", self._path
            )
        self._at += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._size - self._at)
        if want <= 0:
            return 0
        data = self._get(self._at + want)
        buffer[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        """The rest in one GET: io's own reads it 8 KiB a request (a whole 100 KiB file was 13)."""
        return self._get(self._size) if self._at < self._size else b""


def ancestors(path: str) -> list[str]:
    """`a/b/c`'s folders: `a/b`, `a`."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
