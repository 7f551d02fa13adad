"""Where a checkpoint's own records live: the audit trail's folder for a checkpoint, named from
its one spelling, so that every deployment and the CLI meet there (the lease beside it too)."""

from __future__ import annotations

import hashlib

from checkpoint.format import AUDIT_FOLDER
from checkpoint.storage import Storage, normalize_url

__all__ = ["AUDIT_FOLDER", "folder_name", "own_place"]


def folder_name(checkpoint_url: str) -> str:
    """A checkpoint's folder in an audit trail: its name and a digest of its one spelling."""
    url = normalize_url(checkpoint_url)
    digest = hashlib.sha256(url.encode()).hexdigest()[:8]
    return f"{url.rsplit('/', 1)[-1]}-{digest}"


def own_place(checkpoint: Storage) -> tuple[Storage, str]:
    """(storage, folder) of the records that belong to the checkpoint's own place, whatever audit
    trail a run names: its maintenance lease, and what an apply must not take from a trail a run
    may point elsewhere (a retirement plan's record). Beside the checkpoint as the storage finds it,
    so every spelling of it meets there, and writing there needs the rights the checkpoint's own
    folder needs."""
    where = checkpoint.resolved()
    return where.parent(), f"{AUDIT_FOLDER}/{folder_name(where.url)}"
