"""Azure Blob Storage (and ADLS Gen2 through its blob endpoint) through adlfs: a new blob by the
store's own precondition (`If-None-Match: *`), server-side copies, deletes side by side."""

from __future__ import annotations

from checkpoint.storage.backend import Backend
from checkpoint.storage.files import Calls, write_error
from checkpoint.storage.generic import FsspecBackend, delete_side_by_side


class AzureBackend(FsspecBackend):
    def write_new(self, target: str, data: bytes, temp_prefix: str) -> str | None:
        """One upload with `If-None-Match: *` (adlfs' `overwrite=False`): the store itself refuses
        to replace a blob (409, FileExistsError), so of two writers racing for a name exactly one
        wins. A blob of several blocks is checked when its block list is committed, so it appears
        whole or not at all."""
        try:
            self.fs.pipe_file(target, data, overwrite=False)
        except FileExistsError:
            raise
        except OSError as exc:
            raise write_error(exc, target) from exc
        return None

    def put_new(self, local_path: str, target: str, temp_prefix: str) -> None:
        """`write_new` streamed from the file, block by block."""
        try:
            self.fs.put_file(local_path, target, overwrite=False)
        except FileExistsError:
            raise
        except OSError as exc:
            raise write_error(exc, target) from exc

    def copies_to(self, other: Backend) -> bool:
        return other.fs is self.fs  # one account, one set of credentials

    def copy(self, source: str, target: str, size: int, calls: Calls) -> None:
        # Copy Blob within one account completes before it answers: the bytes stay in the store.
        calls.add("copy")
        self.fs.cp_file(source, target)

    def delete(
        self,
        root: str,
        rels: list[str],
        fence: str | None = None,
        folders: dict[str, list[int]] | None = None,
    ) -> dict[str, str]:
        """One Delete Blob a file, several in flight (`delete_side_by_side`). Blob Batch would take
        256 a request, but Azurite refuses the batches the SDK sends, so it is not used yet."""
        return delete_side_by_side(self.fs, root, rels)
