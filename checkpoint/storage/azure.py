"""Azure Blob Storage (and ADLS Gen2 through its blob endpoint) through adlfs.

What the shared `PreconditionBackend` relies on, as Blob Storage does it:
- create-if-absent: `Put Blob` or `Put Block List` with `If-None-Match: *` (adlfs' `mode="create"`,
  its `overwrite=False`); the store answers 409 and adlfs raises FileExistsError. A blob of several
  blocks is checked when its block list is committed;
- server-side copy: `Copy Blob` within one account completes before it answers;
- deletes: one `Delete Blob` a file. Blob Batch would take 256 a request, but Azurite refuses the
  batches the SDK sends, so it is not used yet.
"""

from __future__ import annotations

from checkpoint.storage.files import FileInfo
from checkpoint.storage.generic import PreconditionBackend


class AzureBackend(PreconditionBackend):
    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None:
        """One `Get Blob Properties` (a HEAD): adlfs' `info` lists the name as a folder too when
        it is missing."""
        from azure.core.exceptions import ResourceNotFoundError
        from fsspec.asyn import sync

        container, blob, _ = self.fs.split_path(path)

        async def head():
            async with self.fs.service_client.get_blob_client(container, blob) as client:
                return await client.get_blob_properties()

        try:
            props = sync(self.fs.loop, head)
        except ResourceNotFoundError:
            return None
        return FileInfo(rel, int(props.size or 0), props.last_modified.timestamp())
