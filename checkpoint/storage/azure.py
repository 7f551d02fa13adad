"""Azure Blob Storage (and ADLS Gen2 through its blob endpoint) through adlfs.

What the shared `PreconditionBackend` relies on, as Blob Storage does it:
- create-if-absent: `Put Blob` or `Put Block List` with `If-None-Match: *` (adlfs' `mode="create"`,
  its `overwrite=False`); the store answers 409 and adlfs raises FileExistsError. A blob of several
  blocks is checked when its block list is committed;
- server-side copy: `Copy Blob` within one account completes before it answers;
- deletes: Blob Batch, 256 `Delete Blob`s a request, each answered on its own (`delete`).
"""

from __future__ import annotations

import inspect
from typing import Any

from checkpoint.errors import StorageError
from checkpoint.storage.files import FileInfo, Folder, folder_marker
from checkpoint.storage.generic import PreconditionBackend

# Blob Batch's limit of subrequests in one request.
BATCH_MAX = 256
# A whole batch refused as a request the store does not serve (an Azure-compatible store without
# Blob Batch): its files are deleted one at a time instead. Any other refusal (credentials,
# throttling) raises, as S3's DeleteObjects does.
_NO_BATCH = {400, 404, 405, 501}


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

    def delete(
        self,
        root: str,
        rels: list[str],
        fence: str | None = None,
        folders: dict[str, list[int]] | None = None,
    ) -> dict[str, str]:
        """Blob Batch: `BATCH_MAX` `Delete Blob`s a request. {rel: why} of the files not deleted;
        a blob already gone (404) counts as deleted. Each answer is matched to its subrequest by
        the request id the store echoes, so nothing is reported deleted on faith: a subrequest
        with no answer of its own is not deleted. A request refused as a whole raises, naming the
        store's code; one refused as a call the store does not serve (`_NO_BATCH`) deletes its
        files one at a time.

        Sent by the SDK's synchronous client: its batch body is Azure Storage's own, which Azurite
        reads, while the asynchronous client's (a MIME boundary of the email package, no
        `Content-Length` in a subrequest) Azurite refuses part by part. Where the credentials have
        no synchronous twin (a token credential the caller made), one `Delete Blob` a file."""
        from azure.core.exceptions import HttpResponseError

        service = self._sync_service() if len(rels) > 1 else None  # one file: one Delete Blob
        if service is None:
            return super().delete(root, rels, fence, folders)
        container, _, prefix = root.partition("/")
        failed: dict[str, str] = {}
        with service:
            client = service.get_container_client(container)
            for start in range(0, len(rels), BATCH_MAX):
                chunk = rels[start : start + BATCH_MAX]
                names = [f"{prefix}/{rel}" if prefix else rel for rel in chunk]
                try:
                    parts = list(client.delete_blobs(*names, raise_on_any_failure=False))
                except HttpResponseError as exc:
                    if exc.status_code in _NO_BATCH:
                        failed.update(super().delete(root, chunk, fence, folders))
                        continue
                    code = getattr(exc, "error_code", None)  # the SDK's enum: the store's name is its value
                    code = getattr(code, "value", code) or exc.status_code
                    raise StorageError(f"Blob Batch failed: {code}: {exc.reason}", root) from exc
                failed.update(_unanswered(chunk, parts))
        self.fs.invalidate_cache(root)
        return failed

    def _sync_service(self) -> Any:
        """A synchronous client of the account adlfs reaches, with its credentials; None where they
        have no synchronous form (`delete`)."""
        from azure.storage.blob import BlobServiceClient

        fs = self.fs
        if getattr(fs, "connection_string", None):
            return BlobServiceClient.from_connection_string(fs.connection_string)
        credential = fs.service_client.credential
        if credential is not None and inspect.iscoroutinefunction(getattr(credential, "get_token", None)):
            # adlfs keeps the synchronous twin of the token credentials it made itself
            credential = getattr(fs, "sync_credential", None)
            if credential is None:
                return None
        return BlobServiceClient(account_url=fs.service_client.url, credential=credential)

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


def _unanswered(rels: list[str], parts: list[Any]) -> dict[str, str]:
    """{rel: why} of the subrequests (one a rel, in order) that Blob Batch's answer `parts` does not
    show as done. A deletion counts only where its part echoes the subrequest's id. A failure's
    part may carry none (Azurite's do not): it is taken by its place, as the SDK takes it, when
    the answer has a part for every subrequest; a blob already gone (404) counts as deleted."""
    why: dict[str, str] = {}
    whole = len(parts) == len(rels)
    for i, rel in enumerate(rels):
        part = parts[i] if i < len(parts) else None
        sent = part.request.headers.get("x-ms-client-request-id") if part is not None else None
        echoed = part.headers.get("x-ms-client-request-id") if part is not None else None
        done = part is not None and 200 <= part.status_code < 300
        if part is None or not sent or echoed != sent and (done or echoed is not None or not whole):
            why[rel] = "no answer of its own in the batch's response"
        elif not done and part.status_code != 404:
            code = part.headers.get("x-ms-error-code") or part.status_code
            why[rel] = f"{code}: {part.status_code} {part.reason}"
    return why


def _marker(blob: Any) -> bool:
    """An empty blob that stands for a folder: `hdi_isfolder` (Hadoop's Azure connectors), or a
    name ending in `/`."""
    metadata = {k.lower(): v for k, v in (blob.metadata or {}).items()}
    size = int(blob.size or 0)
    return folder_marker(blob.name, size) or (not size and metadata.get("hdi_isfolder", "").lower() == "true")
