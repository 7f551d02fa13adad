"""Checkpoint storage through fsspec: one recursive listing, ranged and bulk reads.

A checkpoint is addressed by a URL (plain path, file://, s3://, any fsspec protocol). Paths inside the
model are relative to the checkpoint root and always use `/`, whatever the backend.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fsspec.core import url_to_fs

from .errors import NotACheckpointError, StorageError


@dataclass(frozen=True)
class FileInfo:
    """One file of a listing. `mtime` is seconds since the epoch, or None when the backend has none."""

    rel: str
    size: int
    mtime: float | None


def mtime_of(entry: dict[str, Any]) -> float | None:
    # Local files carry `mtime` (float); S3 `LastModified` (datetime); other backends vary.
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified"):
        value = entry.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, _dt.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def is_local(fs) -> bool:
    """Whether an fsspec filesystem is the local disk (links, renames and fsync work there)."""
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return proto in ("file", "local")


def options_from_env(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """Explicit options win; for s3:// the standard AWS_ENDPOINT_URL and AWS_REGION fill the gaps.

    Keys and secrets are left to botocore's own credential chain (AWS_ACCESS_KEY_ID, profiles,
    instance roles), so they never pass through, or get logged by, this code.
    """
    options = dict(storage_options or {})
    if not url.startswith(("s3://", "s3a://")):
        return options
    client_kwargs = dict(options.get("client_kwargs") or {})
    for env, name in (("AWS_ENDPOINT_URL", "endpoint_url"), ("AWS_REGION", "region_name")):
        if os.environ.get(env) and name not in client_kwargs and name not in options:
            client_kwargs[name] = os.environ[env]
    if client_kwargs:
        options["client_kwargs"] = client_kwargs
    return options


class Storage:
    """The files of one checkpoint root."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        self.url = url.rstrip("/") or url
        if self.url.startswith("s3a://"):
            self.url = "s3://" + self.url[len("s3a://") :]  # Spark's spelling of the same bucket
        try:
            self.fs, root = url_to_fs(self.url, **options_from_env(self.url, storage_options))
        except (ValueError, ImportError) as exc:
            raise StorageError(f"cannot open storage: {exc}", url) from exc
        self.root = root.rstrip("/")

    def child(self, rel: str) -> Storage:
        """The storage of a folder below this root, sharing the filesystem (and its connections)."""
        sub = object.__new__(Storage)
        sub.fs, sub.root = self.fs, self.full(rel)
        sub.url = f"{self.url}/{rel}" if rel else self.url
        return sub

    @property
    def protocol(self) -> str:
        proto = self.fs.protocol
        return proto if isinstance(proto, str) else proto[0]

    def full(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def list_files(self) -> list[FileInfo]:
        """Every file under the root with size and mtime, from one recursive listing.

        On object stores `find` is a flat prefix listing, so no per-directory walk and no HEAD per
        object. A missing root is an error, never an empty checkpoint.
        """
        # fsspec caches listings per filesystem instance, and instances are shared: a listing must
        # see deletions and new commits made since the last one.
        self.fs.invalidate_cache(self.root)
        try:
            entries = self.fs.find(self.root, withdirs=False, detail=True)
        except FileNotFoundError as exc:
            raise NotACheckpointError("no such file or directory", self.url) from exc
        except PermissionError as exc:
            raise StorageError(f"permission denied while listing: {exc}", self.url) from exc
        except OSError as exc:
            raise StorageError(f"listing failed: {exc}", self.url) from exc
        prefix = self.root + "/"
        files = []
        for name, entry in entries.items():
            name = name.rstrip("/")
            if not name.startswith(prefix):
                # A lone file given as the root lists as itself: that is not a checkpoint folder.
                continue
            files.append(FileInfo(name[len(prefix) :], int(entry.get("size") or 0), mtime_of(entry)))
        if not files and not self._is_dir():
            raise NotACheckpointError("no such directory", self.url)
        files.sort(key=lambda f: f.rel)
        return files

    def _is_dir(self) -> bool:
        try:
            return bool(self.fs.isdir(self.root))
        except OSError:
            return False

    def read_bytes(self, rel: str, start: int | None = None, end: int | None = None) -> bytes:
        try:
            return self.fs.cat_file(self.full(rel), start=start, end=end)
        except FileNotFoundError as exc:
            raise StorageError("file vanished while reading", self.full(rel)) from exc
        except OSError as exc:
            raise StorageError(f"read failed: {exc}", self.full(rel)) from exc

    def read_many(self, rels: Iterable[str]) -> dict[str, bytes]:
        """Whole small files, fetched concurrently where the backend is asynchronous."""
        rels = list(rels)
        if not rels:
            return {}
        paths = [self.full(r) for r in rels]
        try:
            got = self.fs.cat(paths, on_error="raise")
        except FileNotFoundError as exc:
            raise StorageError(f"file vanished while reading: {exc}", self.url) from exc
        except OSError as exc:
            raise StorageError(f"read failed: {exc}", self.url) from exc
        if len(paths) == 1 and isinstance(got, (bytes, bytearray)):
            got = {paths[0]: got}
        by_path = {self.fs._strip_protocol(k).rstrip("/"): v for k, v in got.items()}
        return {rel: by_path[self.fs._strip_protocol(path)] for rel, path in zip(rels, paths, strict=True)}

    def open(self, rel: str, block_size: int | None = None, size: int | None = None):
        """A buffered reader; `size` (known from the listing) spares object stores a HEAD request."""
        extra = {"size": size} if size is not None and not is_local(self.fs) else {}
        try:
            return self.fs.open(self.full(rel), "rb", block_size=block_size, **extra)
        except FileNotFoundError as exc:
            raise StorageError("file vanished while reading", self.full(rel)) from exc
        except OSError as exc:
            raise StorageError(f"open failed: {exc}", self.full(rel)) from exc
