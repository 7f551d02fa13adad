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

from typing import Any

from checkpoint.storage.files import FileInfo, Folder, folder_marker
from checkpoint.storage.generic import PreconditionBackend


class AzureBackend(PreconditionBackend):
    @property
    def account(self) -> str | None:  # type: ignore[override]  # read from the client, not set
        return self.fs.service_client.account_name

    def spark_url(self, root: str) -> str:
        """Hadoop's ABFS spelling, which names the account: Spark resolves no container without it."""
        container, _, path = root.partition("/")
        return f"abfss://{container}@{self.account}.dfs.core.windows.net/{path}".rstrip("/")

    def ls(self, top: str, prefix: str) -> Folder:
        """One List Blobs by the folder's prefix with `/` as delimiter (page by page): adlfs lists
        the bare name first and then the folder, two requests where one does (an idle sensor look
        was two listings a checkpoint)."""
        from azure.core.exceptions import ResourceNotFoundError
        from azure.storage.blob import BlobProperties
        from fsspec.asyn import sync

        container, path, _ = self.fs.split_path(top)

        async def listing() -> list[Any]:
            async with self.fs.service_client.get_container_client(container) as client:
                found = client.walk_blobs(
                    name_starts_with=f"{path}/" if path else None, delimiter="/", include=["metadata"]
                )
                return [item async for item in found]

        try:
            items = sync(self.fs.loop, listing)
        except ResourceNotFoundError:  # no such container
            return Folder((), (), False)
        files, folders = [], set()
        for item in items:
            child = f"{container}/{item.name}".rstrip("/")[len(prefix) :]
            if not isinstance(item, BlobProperties):  # the asynchronous client's BlobPrefix: a folder
                folders.add(child)
            elif _marker(item):  # a folder, even one with nothing in it
                if item.name != f"{path}/":
                    folders.add(child)
            else:
                files.append(FileInfo(child, int(item.size or 0), item.last_modified.timestamp()))
        files.sort(key=lambda f: f.rel)
        return Folder(tuple(files), tuple(sorted(folders)), bool(files or folders))

    def _tree(self, top: str) -> list[tuple[str, bool]]:
        """Spark's WASB and ABFS connectors (on an account without a hierarchical namespace) make
        a folder by writing an empty blob named as the folder, with `hdi_isfolder=true` in its
        metadata; some tools write `<folder>/`. One flat listing of the tree and a HEAD of the
        name itself: called once the files are gone, it holds little."""
        from azure.core.exceptions import ResourceNotFoundError
        from fsspec.asyn import sync

        container, path, _ = self.fs.split_path(top)

        async def listing() -> list[Any]:
            async with self.fs.service_client.get_container_client(container) as client:
                under = client.list_blobs(name_starts_with=f"{path}/", include=["metadata"])
                blobs = [b async for b in under]
                try:
                    blobs.append(await client.get_blob_client(path).get_blob_properties())
                except ResourceNotFoundError:
                    pass
                return blobs

        return [(f"{container}/{blob.name}", _marker(blob)) for blob in sync(self.fs.loop, listing)]

    def _drop_markers(self, names: list[str]) -> list[str | None]:
        """Each by the blob's own name: adlfs' delete would drop a trailing `/`."""
        from azure.core.exceptions import ResourceNotFoundError

        async def drop(name: str) -> None:
            container, blob = name.split("/", 1)
            try:
                async with self.fs.service_client.get_container_client(container) as client:
                    await client.delete_blob(blob)
            except ResourceNotFoundError as exc:
                raise FileNotFoundError(name) from exc

        return self._deleted([drop(name) for name in names])

    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None:
        """One `Get Blob Properties` (a HEAD): adlfs' `info` lists the name as a folder too when
        it is missing. A folder's marker is no file."""
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
        if _marker(props):  # a folder's (a fork's destination that Hadoop made is no file)
            return None
        return FileInfo(rel, int(props.size or 0), props.last_modified.timestamp())


def _marker(blob: Any) -> bool:
    """An empty blob that stands for a folder: `hdi_isfolder` (Hadoop's Azure connectors), or a
    name ending in `/`."""
    metadata = {k.lower(): v for k, v in (blob.metadata or {}).items()}
    size = int(blob.size or 0)
    return folder_marker(blob.name, size) or (not size and metadata.get("hdi_isfolder", "").lower() == "true")
