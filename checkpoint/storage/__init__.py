"""Checkpoint storage through fsspec: the one door to bytes.

A checkpoint is addressed by a URL (plain path, file://, s3://, az://, gs://; any other fsspec
protocol read-only, and only with the user's leave: `front.PROVEN`). Paths inside the model are
relative to the checkpoint root and always use `/`, whatever the backend. The front
(`front.Storage`: a root, its children, pickling, call counting, one error) reaches the bytes
through one `backend.Backend` per storage, each in its own module: `local` (durable writes, the
kernel's reads), `s3` (botocore's calls: conditional writes, bulk deletes, server-side copies),
`azure` and `gcs` (the store's own create precondition through adlfs and gcsfs, server-side
copies) and `generic` (fsspec's calls, what the others start from, and the read-only backend of a
protocol not proven); `urls` gives every location one spelling; `files` what they all answer with.
The layers above ask the front questions that act, never which backend it is, nor what flags it
has: `width` (how many requests are worth having in flight at once), `sidecars` (the hidden
checksums Hadoop keeps beside a file), `appended` and `seal_appended` (what `append` wrote, in
place or in parts).

Reads come in the sizes the work needs: a shallow listing of one folder (one delimiter LIST on S3),
a stat (one HEAD), a whole or ranged read (one GET), and the recursive listing that only cleanup
planning and `inspect` need. A whole file is read only up to a bound its caller names (the most
its kind holds, `checkpoint.format.sizes`, or its listed size): a file's own size is data. Every
call is counted in `calls`, shared by a root and its children, so tests and benchmarks can compare
what two checkpoints cost on any backend."""

from checkpoint.storage.files import (
    Calls,
    FileInfo,
    Folder,
    Watch,
    carrying_watch,
    current_watch,
    mtime_of,
    watch_requests,
)
from checkpoint.storage.front import PROVEN, UNPROVEN_LEAVE, Storage
from checkpoint.storage.s3 import DELETE_MAX_KEYS
from checkpoint.storage.urls import (
    credentials_in,
    normalize_url,
    options_from_env,
    redact,
    refuse_userinfo,
    scheme_of,
)

__all__ = [
    "Calls",
    "DELETE_MAX_KEYS",
    "PROVEN",
    "UNPROVEN_LEAVE",
    "FileInfo",
    "Folder",
    "Storage",
    "Watch",
    "carrying_watch",
    "current_watch",
    "credentials_in",
    "mtime_of",
    "normalize_url",
    "options_from_env",
    "redact",
    "refuse_userinfo",
    "scheme_of",
    "watch_requests",
]
