"""Where a checkpoint's own records live: the audit trail's folder for a checkpoint, named from
its one spelling, so that every deployment and the CLI meet there (the lease beside it too)."""

from __future__ import annotations

import hashlib

from checkpoint.format import AUDIT_FOLDER
from checkpoint.storage import normalize_url

__all__ = ["AUDIT_FOLDER", "folder_name"]


def folder_name(checkpoint_url: str) -> str:
    """A checkpoint's folder in an audit trail: its name and a digest of its one spelling."""
    url = normalize_url(checkpoint_url)
    digest = hashlib.sha256(url.encode()).hexdigest()[:8]
    return f"{url.rsplit('/', 1)[-1]}-{digest}"
