"""Google Cloud Storage through gcsfs: a new object by the store's own precondition
(`ifGenerationMatch=0`), server-side copies (rewrite), deletes side by side."""

from __future__ import annotations

from typing import BinaryIO

from checkpoint.storage.backend import Backend
from checkpoint.storage.files import Calls, write_error
from checkpoint.storage.generic import FsspecBackend, delete_side_by_side


class GCSBackend(FsspecBackend):
    def open(self, path: str, block_size: int | None, size: int | None, fence: str | None = None) -> BinaryIO:
        f = self.fs.open(path, "rb", block_size=block_size, **({} if size is None else {"size": size}))
        if size is not None:
            # gcsfs asks for the object's details at the first read unless it holds them; its
            # `details` is a read-only property over `_details`. The size is all a read needs.
            f._details = {"name": path, "size": size, "type": "file"}
        return f

    def write_new(self, target: str, data: bytes, temp_prefix: str) -> str | None:
        """One upload with `ifGenerationMatch=0`: the store itself refuses to replace an object
        (412, FileExistsError), so of two writers racing for a name exactly one wins."""
        try:
            self.fs.pipe_file(target, data, mode="create")
        except FileExistsError:
            raise
        except OSError as exc:
            raise write_error(exc, target) from exc
        return None

    def put_new(self, local_path: str, target: str, temp_prefix: str) -> None:
        """`write_new` streamed from the file: gcsfs uploads it in chunks (resumable above one), the
        precondition checked by the store when the object is finalised."""
        try:
            self.fs.put_file(local_path, target, mode="create")
        except FileExistsError:
            raise
        except OSError as exc:
            raise write_error(exc, target) from exc

    def copies_to(self, other: Backend) -> bool:
        return other.fs is self.fs  # one endpoint, one set of credentials

    def copy(self, source: str, target: str, size: int, calls: Calls) -> None:
        calls.add("copy")
        self.fs.cp_file(source, target)  # rewriteTo: the bytes stay in the store

    def delete(
        self,
        root: str,
        rels: list[str],
        fence: str | None = None,
        folders: dict[str, list[int]] | None = None,
    ) -> dict[str, str]:
        """One DELETE a file, several in flight (`delete_side_by_side`). GCS's batch endpoint would
        take 100 a request, but gcsfs does not map its answer back to the files and no emulator
        serves it, so it is not used yet."""
        return delete_side_by_side(self.fs, root, rels)
