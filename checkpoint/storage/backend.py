"""What the front asks of a backend: the calls whose cost or meaning differs between local disks,
S3 and other fsspec protocols, on full paths, and the few facts about a backend (`latency_bound`,
`appends`, `hidden_checksums`) from which the front answers the layers above (`width`,
`sidecars`, `appended`, `seal_appended`): nothing above storage reads them.

A backend raises what its library raises (OSError, FileNotFoundError, FileExistsError); the
front turns that into the one StorageError the core handles, counts the call, and maps paths
relative to its root."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, Protocol, TypeVar

from checkpoint.storage.files import Calls, FileInfo, Folder

T = TypeVar("T")


class Backend(Protocol):
    fs: Any
    # Each request waits on a network round trip: list and read many at once, in threads. False
    # on a local disk, where a thread would only contend for the CPU.
    latency_bound: bool
    # `append` adds to the one file (else each append writes a part object beside it).
    appends: bool
    # Hadoop's file system for this storage keeps a hidden `.<name>.crc` beside each file it
    # writes, and checks it on every read (its local file system).
    hidden_checksums: bool

    @property
    def account(self) -> str | None:
        """The account the credentials reach, where a store's URLs may name one (Azure's); else None."""
        ...

    def find(self, top: str, prefix: str) -> list[FileInfo]:
        """Every file under `top`, named from `prefix` on; a missing `top` lists as nothing."""
        ...

    def pages(self, top: str, prefix: str, page: int) -> Iterator[list[FileInfo]]:
        """What `find` lists, in order of path (as `sorted` orders the names) and a page of at most
        `page` files at a time, never the whole tree at once."""
        ...

    def ls(self, top: str, prefix: str) -> Folder: ...

    def is_dir(self, path: str) -> bool: ...

    # Every read below takes the `fence` of the root it reads under (`fence(root)`): where links
    # exist, a file that does not resolve inside it, or is no regular file, is refused unread
    # (checkpoint.errors.UntrustedFileError). None where the storage has no links.

    def fence(self, root: str) -> str | None: ...

    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None: ...

    def cat(self, path: str, start: int, end: int, fence: str | None = None) -> bytes:
        """The bytes from `start` to `end` (fewer at the file's end)."""
        ...

    def cat_bounded(self, path: str, limit: int, fence: str | None = None) -> bytes:
        """The whole file, one request; one longer than `limit` raises OversizedFileError having
        read at most the bound plus one byte."""
        ...

    def cat_many(self, paths: list[str], fence: str | None, limit: int) -> dict[str, bytes]:
        """{path: bytes}, paths as given, each as `cat_bounded` reads it."""
        ...

    def heads(
        self, paths: list[str], ends: list[int], fence: str | None = None
    ) -> list[bytes | BaseException]: ...

    def download(
        self, path: str, out: BinaryIO, size: int | None, chunk: int, calls: Calls, fence: str | None = None
    ) -> tuple[int, int]:
        """(bytes, CRC32C) of the file copied into `out`, counting each read in `calls`."""
        ...

    def open(
        self, path: str, block_size: int | None, size: int | None, fence: str | None = None
    ) -> BinaryIO: ...

    def write(self, target: str, data: bytes) -> None: ...

    def write_new(self, target: str, data: bytes, temp_prefix: str) -> str | None: ...

    def replace(self, target: str, data: bytes, etag: str | None, temp_prefix: str) -> str | None: ...

    def write_from(self, target: str, temp_prefix: str, fill: Callable[[str], T]) -> T:
        """A new file at `target`, never over another, whose bytes `fill` writes to a local path."""
        ...

    def put_file(self, local_path: str, target: str, *, move: bool) -> None: ...

    def put_new(self, local_path: str, target: str, temp_prefix: str) -> None:
        """A local file uploaded to `target` streamed from disk, whole or not at all, never over
        another: FileExistsError when `target` exists."""
        ...

    def append(self, target: str, data: bytes) -> str: ...

    def refuse_writes(self) -> None:
        """Raises where nothing may be written (UnprovenStorageError)."""

    def copies_to(self, other: Backend) -> bool:
        """Whether `copy` reaches `other`'s files server-side."""
        ...

    def copy(self, source: str, target: str, size: int, calls: Calls) -> None: ...

    def link(self, source: str, target: str, fence: str | None = None) -> bool:
        """A second name for a file on this same disk, or False when the caller must copy."""
        ...

    def delete(
        self,
        root: str,
        rels: list[str],
        fence: str | None = None,
        folders: dict[str, list[int]] | None = None,
    ) -> dict[str, str]:
        """{rel: why} of the files not deleted. Where folders exist, each is gone through as the
        folder `folders` names ({rel: [device, inode]}) or as first found, never through a link."""
        ...

    def folder_ids(self, full: Callable[[str], str], rels: Iterable[str]) -> dict[str, list[int]]:
        """{rel: [device, inode]} of each folder that is one; {} where there are no folders."""
        ...

    def remove_empty_folders(
        self, full: Callable[[str], str], rels: Iterable[str], fence: str | None = None
    ) -> None:
        """Each folder that holds nothing, and its emptied parents up to the root."""
        ...

    def escapes(
        self, full: Callable[[str], str], folder: str, files: Iterable[FileInfo]
    ) -> dict[str, str]: ...

    def identity(self, root: str) -> str:
        """The one spelling of a root as the storage finds it (the lease's identity)."""
        ...

    def spark_url(self, root: str) -> str: ...
