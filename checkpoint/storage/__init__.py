"""Checkpoint storage through fsspec: the one door to bytes.

A checkpoint is addressed by a URL (plain path, file://, s3://, any fsspec protocol). Paths inside
the model are relative to the checkpoint root and always use `/`, whatever the backend. The front
(`front.Storage`: a root, its children, pickling, call counting) reaches the bytes through the
backend modules: `local` (durable writes, the kernel's reads), `s3` (botocore's calls: conditional
writes, bulk deletes, server-side copies) and fsspec's generic calls for any other protocol; `urls`
gives every location one spelling; `files` what they all answer with.

Reads come in the sizes the work needs: a shallow listing of one folder (one delimiter LIST on S3),
a stat (one HEAD), a whole or ranged read (one GET), and the recursive listing that only cleanup
planning and `inspect` need. Every call is counted in `calls`, shared by a root and its children, so
tests and benchmarks can compare what two checkpoints cost on any backend.
"""

from checkpoint.storage.files import Calls, FileInfo, Folder, mtime_of
from checkpoint.storage.front import Storage
from checkpoint.storage.local import is_local
from checkpoint.storage.s3 import DELETE_MAX_KEYS
from checkpoint.storage.urls import normalize_url, options_from_env, scheme_of

__all__ = ["DELETE_MAX_KEYS", "Calls", "FileInfo", "Folder", "Storage", "is_local", "mtime_of",
           "normalize_url", "options_from_env", "scheme_of"]  # fmt: skip
