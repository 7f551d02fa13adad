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

from checkpoint.storage.files import FileInfo, Folder, folder_marker
from checkpoint.storage.generic import PreconditionBackend

# Blob Batch's limit of subrequests in one request.
BATCH_MAX = 256


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
        a blob already gone counts as deleted. Nothing is reported deleted on faith: a deletion
        counts only where its answer echoes the subrequest's id, and a `BlobNotFound` that echoes
        none (Azurite's failures carry none) only once a HEAD finds the blob gone. A batch the
        store refuses as a whole, or answers in a shape the SDK cannot read, is not retried: its
        files are deleted one at a time, each answered on its own, as a single file is.

        Sent by the SDK's synchronous client: its batch body is Azure Storage's own, which Azurite
        reads, while the asynchronous client's (a MIME boundary of the email package, no
        `Content-Length` in a subrequest) Azurite refuses part by part. Where the credentials have
        no synchronous twin (a token credential the caller made), one `Delete Blob` a file."""
        from azure.core.exceptions import AzureError

        container, _, prefix = root.partition("/")
        names = {f"{prefix}/{rel}" if prefix else rel: rel for rel in rels}
        try:
            service = self._sync_service() if len(rels) > 1 else None  # one file: one Delete Blob
        except (AzureError, ValueError):  # credentials adlfs took that the SDK's other client does not
            service = None
        if service is None:
            return self._delete_each(container, names)
        failed: dict[str, str] = {}
        with service:
            client = service.get_container_client(container)
            blobs = list(names)
            for start in range(0, len(blobs), BATCH_MAX):
                chunk = blobs[start : start + BATCH_MAX]
                try:
                    # Not retried as a whole: a throttled or refused batch goes a file at a time.
                    parts = list(client.delete_blobs(*chunk, raise_on_any_failure=False, retry_total=0))
                except (AzureError, ValueError, TypeError):  # the SDK's reading of an odd answer too
                    failed.update(self._delete_each(container, {b: names[b] for b in chunk}))
                    continue
                unsure, why = _unanswered(chunk, parts)
                gone = {b for b in unsure if self._gone(f"{container}/{b}")}
                why.update({b: "BlobNotFound answered without its request id, and still there"
                            for b in unsure - gone})  # fmt: skip
                failed.update({names[b]: reason for b, reason in why.items()})
        return failed

    def _gone(self, name: str) -> bool:
        """Whether a HEAD finds no blob `name`; a HEAD that fails finds nothing out."""
        from azure.core.exceptions import AzureError

        try:
            return self.stat(name, name) is None
        except (AzureError, OSError):
            return False

    def _delete_each(self, container: str, names: dict[str, str]) -> dict[str, str]:
        """One `Delete Blob` a blob, by its exact name ({blob: rel}): {rel: why} of those not
        deleted, a blob already gone counting as deleted. adlfs' own delete parses the name as a
        URL, which drops a tab or a newline in it and would delete another blob."""
        got = self._delete_names([f"{container}/{blob}" for blob in names])
        return {rel: why for rel, why in zip(names.values(), got, strict=True) if why}

    def _sync_service(self) -> Any:
        """A synchronous client of the account adlfs reaches, with its credentials and timeouts;
        None where the credentials have no synchronous form (`delete`)."""
        from azure.storage.blob import BlobServiceClient

        fs = self.fs
        given = getattr(fs, "_timeout_kwargs", {})
        timeouts = {k: v for k, v in given.items() if k in ("connection_timeout", "read_timeout")}
        if getattr(fs, "connection_string", None):
            return BlobServiceClient.from_connection_string(fs.connection_string, **timeouts)
        credential = fs.service_client.credential
        if credential is not None and inspect.iscoroutinefunction(getattr(credential, "get_token", None)):
            # adlfs keeps the synchronous twin of the token credentials it made itself
            credential = getattr(fs, "sync_credential", None)
            if credential is None:
                return None
        return BlobServiceClient(account_url=fs.service_client.url, credential=credential, **timeouts)

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

    def _delete_names(self, names: list[str]) -> list[str | None]:
        """Each by the blob's own name: adlfs' delete would drop a trailing `/` (a folder's
        marker) or a tab, and parse the rest as a URL."""
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


def _unanswered(blobs: list[str], parts: list[Any]) -> tuple[set[str], dict[str, str]]:
    """What Blob Batch's answer `parts` says of the subrequests deleting `blobs` (one a blob, in
    order): the blobs answered `BlobNotFound` by a part that echoes no request id, to be checked,
    and {blob: why} of those not deleted. A part is a subrequest's own only where it echoes that
    subrequest's id; one echoing none is taken by its place, as the SDK takes it, only as a
    failure, and only when the answer has a part for every subrequest."""
    unsure: set[str] = set()
    why: dict[str, str] = {}
    whole = len(parts) == len(blobs)
    for i, blob in enumerate(blobs):
        part = parts[i] if i < len(parts) else None
        sent = part.request.headers.get("x-ms-client-request-id") if part is not None else None
        echoed = part.headers.get("x-ms-client-request-id") if part is not None else None
        code = part.headers.get("x-ms-error-code") if part is not None else None
        if part is None or not sent or echoed not in (sent, None) or (echoed is None and not whole):
            why[blob] = "no answer of its own in the batch's response"
        elif 200 <= part.status_code < 300:
            if echoed is None:
                why[blob] = "answered done without its request id"
        elif part.status_code == 404 and code == "BlobNotFound":
            if echoed is None:
                unsure.add(blob)
        else:
            why[blob] = f"{code or part.status_code}: {part.status_code} {part.reason}"
    return unsure, why


def _marker(blob: Any) -> bool:
    """An empty blob that stands for a folder: `hdi_isfolder` (Hadoop's Azure connectors), or a
    name ending in `/`."""
    metadata = {k.lower(): v for k, v in (blob.metadata or {}).items()}
    size = int(blob.size or 0)
    return folder_marker(blob.name, size) or (not size and metadata.get("hdi_isfolder", "").lower() == "true")
