"""Google Cloud Storage through gcsfs.

What the shared `PreconditionBackend` relies on, as GCS does it:
- create-if-absent: an upload with `ifGenerationMatch=0` (gcsfs' `mode="create"`); the store answers
  412, checked when the object is finalised (a resumable upload's last chunk too), and gcsfs
  raises FileExistsError;
- server-side copy: `rewrite`;
- deletes: one `DELETE` a file. The batch endpoint would take 100 a request, but gcsfs does not map
  its answer back to the files and no emulator serves it, so it is not used yet.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

from checkpoint.storage.files import FileInfo, mtime_of
from checkpoint.storage.generic import PreconditionBackend, ancestors


class GCSBackend(PreconditionBackend):
    def _markers(self, top: str) -> tuple[dict[str, str], set[str]]:
        """Spark's GCS connector makes a folder by writing an empty object named `<folder>/`.
        One flat listing of the tree: called once the files are gone, it holds little."""
        try:
            found = self.fs.find(top, detail=True)
        finally:
            self._forget_listings(top)
        markers, held = {}, set()
        for name, info in (found if isinstance(found, dict) else {}).items():
            folder = name.rstrip("/")
            if folder != top and not folder.startswith(f"{top}/"):
                continue  # a neighbour's (`<top>-live/...`) or the name itself as a file
            if name.endswith("/") and not info.get("size"):
                markers[folder] = name
            else:
                held.update(ancestors(name))
        return markers, held

    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None:
        """One GET of the object's metadata: gcsfs' `info` adds a listing of the name as a folder
        (and, missing, more), two to four requests where a stat needs one."""
        from fsspec.asyn import sync

        bucket, key, _ = self.fs.split_path(path)
        try:
            meta = sync(self.fs.loop, self.fs._call, "GET", "b/{}/o/{}", bucket, key, json_out=True)
        except FileNotFoundError:
            return None
        return FileInfo(rel, int(meta.get("size") or 0), mtime_of(meta))

    def open(self, path: str, block_size: int | None, size: int | None, fence: str | None = None) -> BinaryIO:
        """A reader of ranged GETs, a block each, when the size is known (from a listing): gcsfs'
        own file asks for the object's details (a metadata GET and a listing) when it opens,
        whatever size it is given, three requests before the first byte."""
        if size is None:
            return self.fs.open(path, "rb", block_size=block_size)
        raw = _Ranged(self.fs, path, size)
        return io.BufferedReader(raw, buffer_size=block_size or io.DEFAULT_BUFFER_SIZE)


class _Ranged(io.RawIOBase):
    """An object of known size read by ranged GETs (`cat_file`), as far as each read asks."""

    def __init__(self, fs: Any, path: str, size: int) -> None:
        self._fs, self._path, self._size, self._at = fs, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._size - self._at)
        if want <= 0:
            return 0
        data = self._fs.cat_file(self._path, start=self._at, end=self._at + want)
        buffer[: len(data)] = data
        self._at += len(data)
        return len(data)
