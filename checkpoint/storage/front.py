"""The front of storage (`Storage`): one root, its children, pickling for Spark tasks and worker
processes, and the counter of every call; the package docstring says what each call costs, and the
backend modules hold what differs between local disks, S3 and other fsspec protocols."""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fsspec.core import url_to_fs
from fsspec.spec import AbstractBufferedFile

from checkpoint.errors import NotACheckpointError, StorageError
from checkpoint.policy import POLICY
from checkpoint.storage import listing, s3
from checkpoint.storage.files import (
    VANISHED,
    Calls,
    FileInfo,
    Folder,
    failing,
    found_files,
    mtime_of,
    write_error,
)
from checkpoint.storage.local import (
    escapes,
    fsync_path,
    ignores_case,
    is_local,
    link_into_place,
    local_heads,
    renamed,
    replace_atomically,
    walk_local,
    write_new,
)
from checkpoint.storage.urls import normalize_url, options_from_env

log = logging.getLogger(__name__)
_HEADS_AT_ONCE = 64  # files `read_heads` reads together: on S3 a partition's headers in a round trip or two


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
        if ignores_case(real):
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
        with failing("listing", top):
            try:
                if self.is_local:
                    files = walk_local(top, len(prefix))
                else:
                    try:
                        found = self.fs.find(top, withdirs=False, detail=True)
                    finally:
                        self._forget_listings(top)
                    files = found_files(found, prefix, top, under)
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
        """Every file under the root, as `list_files` gives it, listed as several prefixes at once
        (`listing.list_tree`: the folders `split` names, concurrently, then the rest)."""
        return listing.list_tree(self, split(self), workers)

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
            return s3.list_dir(self, rel)
        self.fs.invalidate_cache(top)
        with failing("listing", top):
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

    @property
    def _one_get(self) -> dict[str, Any]:
        # s3fs reads a whole object in parallel ranges, after a HEAD for its size (and a LIST when
        # the key is missing): one GET is what a small file should cost.
        return {"max_concurrency": 1} if self.protocol == "s3" else {}

    def stat(self, rel: str) -> FileInfo | None:
        """Size and mtime of one file (one HEAD on S3); None when it does not exist or is a folder."""
        self.calls.add("stat")
        if self.protocol == "s3":
            return s3.stat(self, rel)
        with failing("stat", self.full(rel)):
            try:
                entry = self.fs.info(self.full(rel))
            except FileNotFoundError:
                return None
        if entry.get("type") == "directory":
            return None
        return FileInfo(rel, int(entry.get("size") or 0), mtime_of(entry))

    def read_if_exists(self, rel: str) -> bytes | None:
        """A whole file, or None when it does not exist: one GET, so a probe and its read are one."""
        self.calls.add("read")
        with failing("read", self.full(rel)):
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
        with failing("read", full, vanished=VANISHED):
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
                raise StorageError(VANISHED, full)
            size = found.size
        crc, done = 0, 0
        with failing("download", full, vanished=VANISHED), open(dest, "wb") as out:
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
        with failing("read", self.url):
            try:
                got = self.fs.cat(paths, on_error="raise", **self._one_get)
            except FileNotFoundError as exc:  # which of them: the error names it
                raise StorageError(f"{VANISHED}: {exc}", self.url) from exc
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
        to the kernel, then read (`local_heads`), all before the caller decodes any. A file that
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
            got = iter(local_heads(paths, ends))
        else:
            got = iter(self.fs.cat_ranges(paths, 0, ends, on_error="return") if asked else [])
        for info in infos:
            head = next(got) if info.size > 0 else b""
            if isinstance(head, BaseException):
                with failing("read", self.full(info.rel), vanished=VANISHED):
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
            return s3.put(self, target, data, IfNoneMatch="*")
        if not self.is_local:
            try:
                self.fs.pipe_file(target, data, mode="create")
            except FileExistsError:
                raise
            except OSError as exc:
                raise write_error(exc, target) from exc
            return None
        write_new(target, data, temp_prefix)
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
            return s3.put(self, target, data, **({"IfMatch": etag} if etag else {}))
        if not self.is_local:
            self._write_with(self.fs.pipe_file, rel, data, "write")
            return None
        replace_atomically(target, data, temp_prefix)
        return None

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
            s3.copy(self, rel, dest.full(dest_rel), size)
            return None
        if dest.is_local:
            dest.calls.add("write")
            _, crc = link_into_place(
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
            fsync_path(os.path.dirname(target))
        except FileExistsError:
            raise
        except FileNotFoundError as exc:
            raise StorageError(VANISHED, self.full(rel)) from exc
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                return False
            raise write_error(exc, target) from exc
        return True

    def put_file(self, local_path: str, rel: str, *, move: bool = False) -> None:
        """Uploads a local file under a new name, streamed from disk in chunks (multipart on S3).
        `move`: the local file is not needed afterwards, so on a local disk of the same file system
        it is renamed into place instead of copied (a cleanup manifest can be gigabytes)."""

        def put(target: str, path: str) -> None:
            if not (move and self.is_local and renamed(path, target)):
                self.fs.put_file(path, target)
            if self.is_local:  # durable before anything that names it is published (an SST before its zip)
                fsync_path(target)
                fsync_path(os.path.dirname(target))

        self._write_with(put, rel, local_path, "upload")

    def _write_with(self, put, rel: str, what, verb: str) -> None:
        self.calls.add("write")
        target = self.full(rel)
        with failing(verb, target):
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
        with failing("append", target):
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
                return s3.delete(self, rels)
            return self._delete_each(rels)
        finally:
            self.fs.invalidate_cache(self.root)

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
        """{rel: where it really is} for each file that does not resolve inside `folder` of this
        root. Object stores have no links, so a clean relative path is where it says; a local
        disk resolves symlinks (`local.escapes`)."""
        return escapes(self.full, folder, files) if self.is_local else {}

    @property
    def is_local(self) -> bool:
        return is_local(self.fs)

    def s3_connection(self) -> dict[str, str | None]:
        """The bucket, endpoint, region and credentials this root reaches S3 with (see s3.connection)."""
        return s3.connection(self)

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
        with failing("open", full, vanished=VANISHED):
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
