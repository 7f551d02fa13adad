"""The front of storage (`Storage`): one root, its children, pickling for Spark tasks and worker
processes, and the counter of every call; the package docstring says what each call costs, and the
backend modules hold what differs between local disks, S3 and other fsspec protocols."""

from __future__ import annotations

import io
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from fsspec.core import url_to_fs

from checkpoint.errors import NotACheckpointError, StorageError, UnprovenStorageError
from checkpoint.policy import POLICY
from checkpoint.storage import listing
from checkpoint.storage.azure import AzureBackend
from checkpoint.storage.backend import Backend
from checkpoint.storage.files import VANISHED, Calls, FileInfo, Folder, failing, write_error
from checkpoint.storage.gcs import GCSBackend
from checkpoint.storage.generic import UnprovenBackend
from checkpoint.storage.local import LocalBackend
from checkpoint.storage.s3 import S3Backend
from checkpoint.storage.urls import azure_account, normalize_url, options_from_env, scheme_of

log = logging.getLogger(__name__)
_HEADS_AT_ONCE = 64  # files `read_heads` reads together: on S3 a partition's headers in a round trip or two
_BACKENDS: dict[str, Callable[[Any], Backend]] = {
    "file": LocalBackend,
    "local": LocalBackend,
    "s3": S3Backend,
    "abfs": AzureBackend,  # adlfs' first name for az://, abfs[s]:// (urls.py spells them az://)
    "az": AzureBackend,
    "gs": GCSBackend,  # gcsfs' first name for gs:// and gcs://
    "gcs": GCSBackend,
}


# The stores the tests here run against (docs/storage.md), by the one spelling urls.py gives.
PROVEN = {"file": "local disks", "s3": "s3://", "az": "az:// (abfs[s]://, wasb[s]://)", "gs": "gs://"}
# The user's leave to read a store that is not proven: read-only, by the generic backend.
UNPROVEN_LEAVE = "CKPT_UNPROVEN_STORAGE"


def backend_for(fs: Any) -> Backend:
    """The backend for an fsspec filesystem: its own module where one exists, else fsspec's
    generic calls, reading only."""
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return _BACKENDS.get(proto, UnprovenBackend)(fs)


def _refuse_unproven(url: str) -> None:
    leave = os.environ.get(UNPROVEN_LEAVE, "")
    if leave not in ("", "0", "1"):
        raise UnprovenStorageError(f"{UNPROVEN_LEAVE}={leave!r}: set it to 1 or leave it unset")
    if scheme_of(url) not in PROVEN and leave != "1":
        raise UnprovenStorageError(
            f"{scheme_of(url)}:// is not a proven store (proven: {', '.join(PROVEN.values())}); a read-only "
            f"command reads it with --unproven-storage or {UNPROVEN_LEAVE}=1, and nothing writes there",
            url,
        )


class Storage:
    """The files of one checkpoint root."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        account = azure_account(url)
        self.url = normalize_url(url)
        _refuse_unproven(self.url)
        try:
            fs, root = url_to_fs(self.url, **options_from_env(self.url, storage_options, account))
        except (ValueError, TypeError, ImportError) as exc:  # TypeError: a protocol that wants more arguments
            raise StorageError(f"cannot open storage: {exc}", url) from exc
        self.backend = backend_for(fs)
        reached = self.backend.account
        if account is not None and reached != account:
            # adlfs takes a connection string's account over the one asked for, and says nothing.
            raise StorageError(f"the URL names the account {account}; the credentials reach {reached}", url)
        self.root = root.rstrip("/")
        self.calls = Calls()
        self._fence: str | None | bool = False  # not known yet (`fence`)
        self._outer: Storage | None = None

    @property
    def fs(self) -> Any:
        return self.backend.fs

    @fs.setter
    def fs(self, fs: Any) -> None:  # tests count or break the filesystem's calls
        self.backend.fs = fs

    @property
    def fence(self) -> str | None:
        """What every file read under this root must resolve into (its real path, on a storage
        with links; None on an object store), found at the first read. A child whose own real path
        escapes its parent's (a folder made a link) keeps the parent's, so none of its files reads."""
        if self._fence is False:
            own = self.backend.fence(self.root)
            outer = self._outer.fence if self._outer is not None else None
            self._fence = outer if own and outer and not own.startswith(outer) else own
        assert not isinstance(self._fence, bool)
        return self._fence

    def child(self, rel: str) -> Storage:
        """The storage of a folder below this root, sharing the filesystem (and its connections)."""
        rel = "/".join(p for p in rel.split("/") if p)
        if any(p in (".", "..") for p in rel.split("/")):
            raise StorageError("a path below a root may not contain '.' or '..'", f"{self.url}/{rel}")
        sub = self._sibling(self.full(rel), f"{self.url}/{rel}" if rel else self.url, self.calls)
        sub._outer = self if rel else None
        return sub

    def resolved(self) -> Storage:
        """This root as the file system finds it, for an identity (the maintenance lease): on a
        local disk symlinks resolved and case folded where the disk ignores it; an object store's
        URL is one spelling already."""
        real = self.backend.identity(self.root)
        return self if real == self.root else self._sibling(real, real, self.calls)

    def parent(self) -> Storage:
        """The storage of the folder that holds this root (same filesystem and credentials)."""
        if "/" not in self.root.strip("/"):
            if self.root.startswith("/"):
                return self._sibling("/", "/")
            raise StorageError("a checkpoint at the top of a bucket has no folder beside it", self.url)
        return self._sibling(self.root.rpartition("/")[0] or "/", self.url.rpartition("/")[0] or "/")

    def _sibling(self, root: str, url: str, calls: Calls | None = None) -> Storage:
        sub = object.__new__(Storage)
        sub.backend, sub.root, sub.url = self.backend, root, url
        sub.calls = calls if calls is not None else Calls()  # what a checkpoint costs excludes its lease
        sub._fence, sub._outer = False, None
        return sub

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to Spark tasks and planning workers: the backend pickles by its filesystem's
        # arguments; the counter stays here.
        return {"backend": self.backend, "root": self.root, "url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.calls = Calls()
        self._fence, self._outer = False, None

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
        with failing("listing", top):
            try:
                files = self.backend.find(top, self.root + "/")
            except FileNotFoundError as exc:
                if under:
                    return []
                raise NotACheckpointError("no such file or directory", self.url) from exc
        if not files and not under and not self.backend.is_dir(self.root):
            raise NotACheckpointError("no such directory", self.url)
        files.sort(key=lambda f: f.rel)
        return files

    def pages(self, under: str = "", page: int = POLICY.list_page) -> Iterator[list[FileInfo]]:
        """What `list_files` lists, in its order, `page` files at a time at most: a walk of a
        checkpoint of 10^7 files in the memory of a page and of the folder being listed (a shallow
        listing a folder at a time, on S3 too: `FsspecBackend.pages`).
        A missing root is an error, as there; a listing that comes out of order raises, since a
        caller may write what it yields in order (a manifest) and merge it with another."""
        top = self.full(under)
        self.fs.invalidate_cache(top)
        self.calls.add("list")
        if not under:
            log.info("%s: listing every file, a page at a time", self.url)
        last, seen = "", 0
        with failing("listing", top):
            for found in self.backend.pages(top, self.root + "/", page):
                for f in found:
                    if f.rel <= last:
                        raise StorageError(f"the listing came out of order ({f.rel} after {last})", top)
                    last = f.rel
                seen += len(found)
                yield found
        if not seen and not under and not self.backend.is_dir(self.root):
            raise NotACheckpointError("no such directory", self.url)

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
            found = self.list_dir(rel)
            if not found.exists and not rel:
                raise NotACheckpointError("no such directory", self.url)
            out += found.files
            todo += [d for d in found.folders if d not in skip]
        return out

    def list_dir(self, rel: str = "") -> Folder:
        """The files directly in one folder and its subfolders: one delimiter listing on S3.

        A folder that does not exist lists as empty with `exists` False; the caller decides whether
        that is an error. One that lists as its own child is refused.
        """
        self.calls.add("list_dir")
        with failing("listing", self.full(rel)):
            found = self.backend.ls(self.full(rel), self.root + "/")
        # A key with an empty part (`team//x`, on S3, Azure or GCS) lists its folder among its own
        # children: a walk (discovery's, a checkpoint's) would list it for ever, and one that
        # skipped it would miss what is under it. Refused, naming it.
        if stray := next((f for f in found.folders if not (f.startswith(f"{rel}/") if rel else f)), None):
            raise StorageError(f"a folder that lists as inside itself: {stray!r}", self.full(rel))
        return found

    def stat(self, rel: str) -> FileInfo | None:
        """Size and mtime of one file (one HEAD on S3); None when it does not exist or is a folder."""
        self.calls.add("stat")
        with failing("stat", self.full(rel)):
            return self.backend.stat(self.full(rel), rel, self.fence)

    # A whole file is read only up to a bound the caller names: the most its kind ever holds
    # (`checkpoint.format.sizes`), or the size its listing gave. A longer one raises
    # OversizedFileError having read the bound plus one byte, so no file's own claim of its size
    # (a sparse file of gigabytes where Spark writes 70 bytes) sizes an allocation.

    def read_if_exists(self, rel: str, *, limit: int) -> bytes | None:
        """A whole file of at most `limit` bytes, or None when it does not exist: one GET, so a
        probe and its read are one."""
        self.calls.add("read")
        with failing("read", self.full(rel)):
            try:
                return self.backend.cat_bounded(self.full(rel), limit, self.fence)
            except (FileNotFoundError, IsADirectoryError):
                return None

    def read_bytes(self, rel: str, *, limit: int) -> bytes:
        """A whole file of at most `limit` bytes."""
        self.calls.add("read")
        with failing("read", self.full(rel), vanished=VANISHED):
            return self.backend.cat_bounded(self.full(rel), limit, self.fence)

    def read_range(self, rel: str, start: int, end: int) -> bytes:
        """The bytes from `start` to `end` (offsets from the file's start; fewer at its end)."""
        self.calls.add("read")
        with failing("read", self.full(rel), vanished=VANISHED):
            return self.backend.cat(self.full(rel), start, end, self.fence)

    def download(
        self, rel: str, dest: str, size: int | None = None, chunk: int = POLICY.copy_chunk_bytes
    ) -> tuple[int, int]:
        """Copies a file to local disk one chunk at a time and returns (bytes, CRC32C) of what was
        written: memory is one chunk whatever the file's size. On object stores each chunk is one
        ranged GET (`size`, when known, spares a HEAD); a file shorter or longer than `size` fails."""
        full = self.full(rel)
        with failing("download", full, vanished=VANISHED), open(dest, "wb") as out:
            done, crc = self.backend.download(full, out, size, chunk, self.calls, self.fence)
        if size is not None and done != size:
            raise StorageError(f"read {done} bytes where {size} were expected", full)
        return done, crc

    def read_many(self, rels: Iterable[str], *, limit: int) -> dict[str, bytes]:
        """Whole small files, fetched concurrently where the backend is asynchronous; one longer
        than `limit` raises OversizedFileError, having read the bound plus one byte."""
        rels = list(rels)
        if not rels:
            return {}
        paths = [self.full(r) for r in rels]
        self.calls.add("read", len(paths))
        with failing("read", self.url):
            try:
                got = self.backend.cat_many(paths, self.fence, limit)
            except FileNotFoundError as exc:  # which of them: the error names it
                raise StorageError(f"{VANISHED}: {exc}", self.url) from exc
        return {rel: got[path] for rel, path in zip(rels, paths, strict=True)}

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
        got = iter(
            self.backend.heads(
                [self.full(i.rel) for i in asked], [min(length, i.size) for i in asked], self.fence
            )
        )
        for info in infos:
            head = next(got) if info.size > 0 else b""
            if isinstance(head, BaseException):
                with failing("read", self.full(info.rel), vanished=VANISHED):
                    raise head
            yield head

    # Writing. Nothing here overwrites unless asked to: `write` is for this tool's own files (plans,
    # outcomes), `write_if_absent` for anything inside a checkpoint.

    def refuse_writes(self) -> None:
        """Raises UnprovenStorageError where nothing may be written: a store no test runs
        against. The doors ask it before any lease is taken."""
        self.backend.refuse_writes()

    def write(self, rel: str, data: bytes) -> None:
        """Creates or replaces one of this tool's own files (a plan): never a checkpoint's."""
        self.calls.add("write")
        with failing("write", self.full(rel)):
            self.backend.write(self.full(rel), data)

    def write_if_absent(self, rel: str, data: bytes, temp_prefix: str) -> str | None:
        """Writes a whole new file atomically, or raises FileExistsError; never overwrites. Returns
        the object's ETag on object stores (for `replace_own`), else None. S3: a conditional PUT
        the store itself refuses to land on an object (`s3`); local: a temp file named
        `<temp_prefix><name>.<hex>.tmp` (so a crash leaves a file cleanup recognises), fsynced,
        then hard-linked into place, which fails if the target exists (`local`)."""
        self.calls.add("write")
        try:
            return self.backend.write_new(self.full(rel), data, temp_prefix)
        except FileExistsError:
            raise
        except OSError as exc:  # a full disk, a read-only folder: one error, never a traceback
            raise StorageError(f"write failed: {exc}", self.full(rel)) from exc

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
        return self.backend.replace(self.full(rel), data, etag, temp_prefix)

    def copy_to(self, rel: str, dest: Storage, dest_rel: str, size: int, temp_prefix: str) -> int | None:
        """Copies one file to a new name in `dest` (another root, any backend) without overwriting;
        returns the CRC32C of the bytes copied, or None when they never passed through here.

        S3 to S3 through one filesystem (same endpoint and credentials): a server-side CopyObject,
        no byte downloaded. Otherwise streamed through `download` (one chunk in memory, CRC32C
        on the way) into what `dest`'s backend writes from: on a local disk a temp file beside the
        target, then hard-linked into place (so a crash never leaves a partial file under the real
        name); on an object store a local temp file, then uploaded whole.
        """
        source, target = self.full(rel), dest.full(dest_rel)
        if self.backend.copies_to(dest.backend):
            with failing("server-side copy", source, vanished="file vanished while copying"):
                self.backend.copy(source, target, size, self.calls)
            return None
        dest.calls.add("write")
        _, crc = dest.backend.write_from(target, temp_prefix, lambda temp: self.download(rel, temp, size))
        return crc

    def link_to(self, rel: str, dest: Storage, dest_rel: str) -> bool:
        """Gives a local file a second name in a local `dest` (a hard link: no byte copied); False
        when the two cannot share it (another file system, a store without hard links, an object
        store), and the caller copies. Only for files nothing rewrites in place, as Spark's state
        and log files: a link is the same bytes, so a change to one would be a change to both."""
        if type(self.backend) is not type(dest.backend):
            return False
        target = dest.full(dest_rel)
        dest.calls.add("write")
        try:
            return self.backend.link(self.full(rel), target, self.fence)
        except FileExistsError:
            raise
        except FileNotFoundError as exc:
            raise StorageError(VANISHED, self.full(rel)) from exc
        except OSError as exc:
            raise write_error(exc, target) from exc

    def put_file(self, local_path: str, rel: str, *, move: bool = False) -> None:
        """Uploads a local file under a new name, streamed from disk in chunks (multipart on S3).
        `move`: the local file is not needed afterwards, so a local disk may rename it into place
        instead of copying it (a cleanup manifest can be gigabytes)."""
        self.calls.add("write")
        with failing("upload", self.full(rel)):
            self.backend.put_file(local_path, self.full(rel), move=move)

    def put_new(self, local_path: str, rel: str, temp_prefix: str) -> None:
        """Uploads a local file of any size under a name that must be free, never overwriting
        (FileExistsError): a local disk links a fsynced temp file into place, S3 makes one
        conditional PUT streamed from the file."""
        self.calls.add("write")
        self.backend.put_new(local_path, self.full(rel), temp_prefix)

    def width(self, most: int) -> int:
        """How many of `most` requests (listings, looks) are worth having in flight at once here:
        all of them where a request waits on a round trip (object stores); one on a local disk,
        where a request is a system call or two and Python work, which threads only contend for."""
        return most if self.backend.latency_bound else 1

    def look_timeout(self) -> float:
        """How long one look at a checkpoint here may take before it is abandoned (a stalled mount,
        a store that stopped answering): a look is a few system calls on a local disk, round trips
        on an object store."""
        return (
            POLICY.remote_look_timeout_seconds if self.backend.latency_bound else POLICY.look_timeout_seconds
        )

    def sidecars(self, name: str) -> list[str]:
        """The names of the files Hadoop's file system keeps beside a file named `name`, in its
        folder: its hidden checksum `.<name>.crc` and that file's own (a local disk's
        ChecksumFileSystem checks them on every read); none where it keeps none (object stores)."""
        if not self.backend.hidden_checksums:
            return []
        return [f".{name}.crc", f".{name}.crc.crc"]

    def append(self, rel: str, data: bytes) -> str:
        """Appends to one of this tool's own logs; returns the path written: the file itself where
        the backend `appends`, else a part `<rel>.<ns>` of its own (object stores)."""
        self.calls.add("write")
        with failing("append", self.full(rel)):
            return self.backend.append(self.full(rel), data)

    def appended(self, rel: str, *, part_limit: int) -> Iterator[tuple[str, BinaryIO]]:
        """What `append` wrote to `rel`, in order: (the path read, a stream of its bytes), each
        stream to be read before the next is asked for (a local file is closed then). The file
        itself where the backend appends in place; else each part `<rel>.<ns>` (object stores; the
        backend's `append` names them), read whole, at most `part_limit` bytes. Nothing when
        nothing was appended."""
        if self.backend.appends:
            if self.stat(rel) is None:
                return
            with self.open(rel, block_size=1 << 20) as fh:
                yield rel, fh
            return
        folder = rel.rpartition("/")[0]
        parts = []
        for f in self.list_dir(folder).files:
            tail = f.rel[len(rel) + 1 :] if f.rel.startswith(rel + ".") else ""
            # A time in nanoseconds, as `format.is_number` reads a long (storage cannot import it).
            if len(tail) <= 19 and tail.isascii() and tail.isdigit():
                parts.append((int(tail), f.rel))
        for _, part in sorted(parts):
            yield part, io.BytesIO(self.read_bytes(part, limit=part_limit))

    def seal_appended(self, rel: str, whole: Callable[[], bytes]) -> None:
        """Where `append` wrote parts (object stores, which have no append), writes `whole()` as
        the one file `rel` (the parts stay: they are the record if a later run dies first); where
        it appended to the file, that file is whole already."""
        if not self.backend.appends:
            self.write(rel, whole())

    def delete_batch(self, rels: list[str], folders: dict[str, list[int]] | None = None) -> dict[str, str]:
        """Deletes files in one request where the store has bulk delete (S3's `DeleteObjects`, Blob
        Storage's Blob Batch: see `s3` and `azure`); returns {rel: why} of the files that were not
        deleted. A file already gone counts as deleted. On a
        local disk each goes through folders opened without following a link and held to
        `folders` ({rel: [device, inode]}, a plan's `folder_ids`): a folder swapped since is not
        gone through, and its files come back as not deleted, with why."""
        if not rels:
            return {}
        self.calls.add("delete")
        try:
            return self.backend.delete(self.root, rels, self.fence, folders)
        finally:
            self.fs.invalidate_cache(self.root)

    def remove_empty_folders(self, rels: Iterable[str]) -> None:
        """Removes each folder that holds nothing, deepest first, and its emptied parents up to the
        root. Object stores have no folders, but Spark's connectors mark them on GCS and Azure: the
        markers of the folders given that hold nothing else are deleted there."""
        self.backend.remove_empty_folders(self.full, rels, self.fence)

    def folder_ids(self, rels: Iterable[str]) -> dict[str, list[int]]:
        """{rel: [device, inode]} of each folder that is one (a local disk's), for `delete_batch`."""
        return self.backend.folder_ids(self.full, rels)

    def outside(self, files: Iterable[FileInfo], folder: str) -> dict[str, str]:
        """{rel: where it really is} for each file that does not resolve inside `folder` of this
        root: on a local disk, symlinks resolved (`local.escapes`); an object store has none."""
        return self.backend.escapes(self.full, folder, files)

    def s3_connection(self) -> dict[str, str | None]:
        """The bucket, endpoint, region and credentials this root reaches S3 with."""
        if not isinstance(self.backend, S3Backend):
            raise ValueError(f"not an S3 root: {self.url}")
        return self.backend.connection(self.root)

    @property
    def spark_url(self) -> str:
        """The root as Spark qualifies it in the paths it records (operator metadata v2): `file:/...`
        on local disk, `s3a://bucket/...` on S3 (Hadoop's connector), `abfss://container@account
        .dfs.core.windows.net/...` on Azure, `<protocol>://...` elsewhere."""
        return self.backend.spark_url(self.root)

    def is_at(self, url: str) -> bool:
        """Whether `url`, read from a checkpoint's own files, names this root: one spelling, and
        where it names an Azure account, the one these credentials reach."""
        try:
            here = normalize_url(url) == self.url
        except StorageError:  # a spelling no location has (user info, a query): not this one
            return False
        return here and azure_account(url) in (None, self.backend.account)

    def open(self, rel: str, block_size: int | None = None, size: int | None = None) -> BinaryIO:
        """A buffered reader. On object stores `block_size` is how much each request reads ahead,
        and `size` (known from the listing) spares a HEAD request."""
        self.calls.add("open")
        with failing("open", self.full(rel), vanished=VANISHED):
            return self.backend.open(self.full(rel), block_size, size, self.fence)

    def read_on(self, head: bytes, info: FileInfo, block_size: int) -> _ReadOn:
        """A reader of a file whose first bytes `head` were read already (`read_heads`): the rest
        is opened only if a reader wants more (a lineage header longer than its first block)."""
        return _ReadOn(head, self, info, block_size)


class _ReadOn:
    """A file's first bytes, already read, then the rest of it from the storage if a reader wants
    more (a lineage header longer than its first block): what the reader gets is the file's bytes
    in order, whichever read they came from."""

    def __init__(self, head: bytes, storage: Storage, info: FileInfo, block_size: int) -> None:
        self._head, self._storage, self._info = io.BytesIO(head), storage, info
        self._block_size = block_size
        self._rest: Any = None

    def read(self, n: int = -1) -> bytes:
        got = self._head.read(n)
        if len(got) == n:
            return got
        at = self._head.tell()
        if self._rest is None:
            if at >= self._info.size:  # the head was the whole file
                return got
            self._rest = self._storage.open(self._info.rel, block_size=self._block_size, size=self._info.size)
            self._rest.seek(at)
        return got + self._rest.read(-1 if n < 0 else n - len(got))

    def __enter__(self) -> _ReadOn:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rest is not None:
            self._rest.close()
