"""S3 through botocore's own calls (s3fs's client): what a request costs is what the call says,
conditional writes and bulk deletes included."""

from __future__ import annotations

from checkpoint.errors import StorageError
from checkpoint.storage.files import FileInfo, Folder, Root, failing, mtime_of, write_error

DELETE_MAX_KEYS = 1000  # S3 DeleteObjects' limit per request


_COPY_OBJECT_MAX = 5 << 30  # S3 copies larger objects only in parts


def list_dir(storage: Root, rel: str) -> Folder:
    # ListObjectsV2 with a delimiter, page by page: s3fs's ls() lists the parent as well when a
    # folder is empty (to tell a file from a folder), which would double an idle sensor tick.
    top = storage.full(rel)
    bucket, _, key = top.partition("/")
    prefix = f"{key}/" if key else ""
    base = len(storage.root) + 1
    files, folders, token = [], [], None
    with failing("listing", top):
        while True:
            page = storage.fs.call_s3(
                "list_objects_v2", Bucket=bucket, Prefix=prefix, Delimiter="/",
                **({"ContinuationToken": token} if token else {}),
            )  # fmt: skip
            subs = page.get("CommonPrefixes", [])
            folders += [f"{bucket}/{p['Prefix']}".rstrip("/")[base:] for p in subs]
            files += [FileInfo(f"{bucket}/{o['Key']}"[base:], int(o.get("Size") or 0), mtime_of(o))
                      for o in page.get("Contents", []) if o["Key"] != prefix]  # fmt: skip
            if not page.get("IsTruncated"):
                break
            token = page["NextContinuationToken"]
    files.sort(key=lambda f: f.rel)
    return Folder(tuple(files), tuple(sorted(folders)), bool(files or folders))


def stat(storage: Root, rel: str) -> FileInfo | None:
    # s3fs's info() answers a missing key with a LIST for a "directory" of that name: a plain
    # HEAD says all a stat needs.
    bucket, _, key = storage.full(rel).partition("/")
    with failing("stat", storage.full(rel)):
        try:
            head = storage.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
    return FileInfo(rel, int(head.get("ContentLength") or 0), mtime_of(head))


def put(storage: Root, target: str, data: bytes, **condition: str) -> str | None:
    bucket, _, key = target.partition("/")
    try:
        got = storage.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
    except FileNotFoundError as exc:
        if "IfMatch" in condition:  # the object it was to replace is gone: someone removed it
            raise FileExistsError(target) from exc
        raise StorageError(f"write failed: {exc}", target) from exc  # no such bucket
    except OSError as exc:
        raise write_error(exc, target) from exc
    finally:
        storage.fs.invalidate_cache(target.rsplit("/", 1)[0])
    return got.get("ETag")


def copy(storage: Root, rel: str, target: str, size: int) -> None:
    storage.calls.add("copy")
    source = storage.full(rel)
    with failing("server-side copy", source, vanished="file vanished while copying"):
        if size < _COPY_OBJECT_MAX:
            # One request: s3fs's copy() would HEAD the source first for a size we already know.
            src_bucket, _, src_key = source.partition("/")
            bucket, _, key = target.partition("/")
            storage.fs.call_s3(
                "copy_object", Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key}
            )
        else:
            storage.fs.copy(source, target)  # multipart copy, still server-side


def delete(storage: Root, rels: list[str]) -> dict[str, str]:
    if len(rels) > DELETE_MAX_KEYS:
        raise ValueError(f"DeleteObjects takes at most {DELETE_MAX_KEYS} keys")
    bucket, _, prefix = storage.root.partition("/")
    key_of = {f"{prefix}/{rel}" if prefix else rel: rel for rel in rels}
    request = {"Objects": [{"Key": k} for k in key_of], "Quiet": False}
    try:
        response = storage.fs.call_s3("delete_objects", Bucket=bucket, Delete=request)
    except OSError as exc:
        # s3fs turns S3's error into an errno (SlowDown becomes EBUSY): name S3's code again.
        code = getattr(exc.__cause__, "response", {}).get("Error", {}).get("Code")
        raise StorageError(
            f"DeleteObjects failed: {code or type(exc).__name__}: {exc}", storage.root
        ) from exc
    deleted = {d["Key"] for d in response.get("Deleted", [])}
    failed = {e["Key"]: f"{e.get('Code')}: {e.get('Message', '')}" for e in response.get("Errors", [])}
    missed = "neither deleted nor failed in the response"
    return {rel: failed.get(key, missed) for key, rel in key_of.items() if key not in deleted}


def connection(storage: Root) -> dict[str, str | None]:
    """Where and as whom this S3 root is reached (endpoint, region, and the credentials only
    when they were given as options; None leaves them to the standard chain), so that an engine
    with its own client (Spark's s3a) reaches the same objects as this code does."""
    if storage.protocol != "s3":
        raise ValueError(f"not an S3 root: {storage.url}")
    kwargs = getattr(storage.fs, "client_kwargs", None) or {}
    return {
        "bucket": storage.root.partition("/")[0],
        "endpoint": kwargs.get("endpoint_url") or getattr(storage.fs, "endpoint_url", None),
        "region": kwargs.get("region_name"),
        "key": getattr(storage.fs, "key", None),
        "secret": getattr(storage.fs, "secret", None),
        "token": getattr(storage.fs, "token", None),
    }
