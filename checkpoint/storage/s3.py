"""S3 through botocore's own calls (s3fs's client): what a request costs is what the call says,
conditional writes and bulk deletes included."""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from checkpoint.errors import StorageError
from checkpoint.storage.backend import Backend
from checkpoint.storage.files import Calls, FileInfo, Folder, mtime_of, write_error
from checkpoint.storage.generic import FsspecBackend

DELETE_MAX_KEYS = 1000  # S3 DeleteObjects' limit per request
_COPY_OBJECT_MAX = 5 << 30  # S3 copies larger objects only in parts
_PUT_OBJECT_MAX = 5 << 30  # and takes larger objects only in parts
_UPLOAD_PART = 8 << 20  # what an upload holds in memory: S3's parts are 5 MiB at least
_UPLOAD_PARTS_MAX = 10_000  # S3's limit on a multipart upload's parts


class S3Backend(FsspecBackend):
    def __init__(self, fs: Any):
        super().__init__(fs)
        # s3fs's loop would retry on top of botocore's: one attempt from it. Set again on a
        # filesystem unpickled in another process, which is built anew from its arguments, and
        # this attribute is not one of them.
        fs.retries = 1

    @property
    def _one_get(self) -> dict[str, Any]:
        # s3fs reads a whole object in parallel ranges, after a HEAD for its size (and a LIST when
        # the key is missing): one GET is what a small file should cost.
        return {"max_concurrency": 1}

    def ls(self, top: str, prefix: str) -> Folder:
        # ListObjectsV2 with a delimiter, page by page: s3fs's ls() lists the parent as well when
        # a folder is empty (to tell a file from a folder), which would double an idle sensor tick.
        bucket, _, key = top.partition("/")
        key_prefix = f"{key}/" if key else ""
        base = len(prefix)
        files, folders, token = [], [], None
        while True:
            page = self.fs.call_s3(
                "list_objects_v2", Bucket=bucket, Prefix=key_prefix, Delimiter="/",
                **({"ContinuationToken": token} if token else {}),
            )  # fmt: skip
            subs = page.get("CommonPrefixes", [])
            folders += [f"{bucket}/{p['Prefix']}".rstrip("/")[base:] for p in subs]
            files += [FileInfo(f"{bucket}/{o['Key']}"[base:], int(o.get("Size") or 0), mtime_of(o))
                      for o in page.get("Contents", []) if o["Key"] != key_prefix]  # fmt: skip
            if not page.get("IsTruncated"):
                break
            token = page["NextContinuationToken"]
        files.sort(key=lambda f: f.rel)
        return Folder(tuple(files), tuple(sorted(folders)), bool(files or folders))

    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None:
        # s3fs's info() answers a missing key with a LIST for a "directory" of that name: a plain
        # HEAD says all a stat needs.
        bucket, _, key = path.partition("/")
        try:
            head = self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        return FileInfo(rel, int(head.get("ContentLength") or 0), mtime_of(head))

    def write_new(self, target: str, data: bytes, temp_prefix: str) -> str | None:
        """One PutObject with `If-None-Match: *`, sent by this code rather than left to s3fs (which
        ignored its `mode="create"` before 2024.12), so the object appears whole or not at all and
        the store itself refuses to replace one, with no window between check and write."""
        return self._put(target, data, IfNoneMatch="*")

    def put_new(self, local_path: str, target: str, temp_prefix: str) -> None:
        """`write_new` streamed from the file: botocore sends a file object's bytes as it reads
        them, so one conditional PutObject (5 GiB at most) needs no copy in memory."""
        size = os.path.getsize(local_path)
        if size > _PUT_OBJECT_MAX:
            raise StorageError(f"{size:,} bytes is more than one conditional PUT takes", target)
        with open(local_path, "rb") as body:
            self._put(target, body, IfNoneMatch="*")

    def replace(self, target: str, data: bytes, etag: str | None, temp_prefix: str) -> str | None:
        """A conditional PUT `If-Match` on `etag`, so a file someone else rewrote or removed
        raises FileExistsError."""
        return self._put(target, data, **({"IfMatch": etag} if etag else {}))

    def _put(self, target: str, data: bytes | BinaryIO, **condition: str) -> str | None:
        bucket, _, key = target.partition("/")
        try:
            got = self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
        except FileNotFoundError as exc:
            if "IfMatch" in condition:  # the object it was to replace is gone: someone removed it
                raise FileExistsError(target) from exc
            raise StorageError(f"write failed: {exc}", target) from exc  # no such bucket
        except OSError as exc:
            raise write_error(exc, target) from exc
        finally:
            self.fs.invalidate_cache(target.rsplit("/", 1)[0])
        return got.get("ETag")

    def put_file(self, local_path: str, target: str, *, move: bool) -> None:
        # s3fs reads a file of less than two parts whole, and otherwise a part at a time: at its
        # 50 MiB default, a retirement manifest of 90 MB was one 90 MB read. Parts of 8 MiB keep an
        # upload within 16 MiB whatever the file, up to 78 GiB (then the parts grow to fit).
        part = max(_UPLOAD_PART, -(-os.path.getsize(local_path) // _UPLOAD_PARTS_MAX))
        self.fs.put_file(local_path, target, chunksize=part, max_concurrency=1)

    def copies_to(self, other: Backend) -> bool:
        return other.fs is self.fs  # one endpoint, one set of credentials

    def copy(self, source: str, target: str, size: int, calls: Calls) -> None:
        calls.add("copy")
        if size < _COPY_OBJECT_MAX:
            # One request: s3fs's copy() would HEAD the source first for a size we already know.
            src_bucket, _, src_key = source.partition("/")
            bucket, _, key = target.partition("/")
            self.fs.call_s3(
                "copy_object", Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}
            )
        else:
            self.fs.copy(source, target)  # multipart copy, still server-side

    def delete(
        self,
        root: str,
        rels: list[str],
        fence: str | None = None,
        folders: dict[str, list[int]] | None = None,
    ) -> dict[str, str]:
        """One DeleteObjects (at most 1000 keys, sent with Quiet=false) read key by key, since S3
        answers 200 even when some keys failed; a key the response names neither as deleted nor
        as failed is a failure, so nothing is reported deleted on faith. Errors keep S3's code
        first (`SlowDown: ...`) so the caller can tell what is worth another try. A request that
        fails as a whole raises."""
        if len(rels) > DELETE_MAX_KEYS:
            raise ValueError(f"DeleteObjects takes at most {DELETE_MAX_KEYS} keys")
        bucket, _, prefix = root.partition("/")
        key_of = {f"{prefix}/{rel}" if prefix else rel: rel for rel in rels}
        request = {"Objects": [{"Key": k} for k in key_of], "Quiet": False}
        try:
            response = self.fs.call_s3("delete_objects", Bucket=bucket, Delete=request)
        except OSError as exc:
            # s3fs turns S3's error into an errno (SlowDown becomes EBUSY): name S3's code again.
            code = getattr(exc.__cause__, "response", {}).get("Error", {}).get("Code")
            raise StorageError(f"DeleteObjects failed: {code or type(exc).__name__}: {exc}", root) from exc
        deleted = {d["Key"] for d in response.get("Deleted", [])}
        failed = {e["Key"]: f"{e.get('Code')}: {e.get('Message', '')}" for e in response.get("Errors", [])}
        missed = "neither deleted nor failed in the response"
        return {rel: failed.get(key, missed) for key, rel in key_of.items() if key not in deleted}

    def spark_url(self, root: str) -> str:
        return f"s3a://{root}"  # Hadoop's connector

    def connection(self, root: str) -> dict[str, str | None]:
        """Where and as whom this S3 root is reached (endpoint, region, and the credentials only
        when they were given as options; None leaves them to the standard chain), so that an
        engine with its own client (Spark's s3a) reaches the same objects as this code does."""
        kwargs = getattr(self.fs, "client_kwargs", None) or {}
        return {
            "bucket": root.partition("/")[0],
            "endpoint": kwargs.get("endpoint_url") or getattr(self.fs, "endpoint_url", None),
            "region": kwargs.get("region_name"),
            "key": getattr(self.fs, "key", None),
            "secret": getattr(self.fs, "secret", None),
            "token": getattr(self.fs, "token", None),
        }
