"""Where the tables of a run go whole: CSV files in the audit root (`audit_url`, or the first
root's audit folder, where each checkpoint's trail lies by default). The UI shows their first rows;
the file holds every one, however large the fleet."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from assets.resources import CheckpointRootsResource
from checkpoint.format import AUDIT_FOLDER
from checkpoint.storage import Storage, normalize_url


def audit_root(roots: CheckpointRootsResource) -> Storage:
    first = roots.roots[0]
    url = roots.audit_url or f"{normalize_url(first.url)}/{AUDIT_FOLDER}"
    return Storage(url, roots.audit_storage_options if roots.audit_url else first.storage_options)


def write_csv(
    roots: CheckpointRootsResource, rel: str, header: Sequence[str], rows: Iterable[Sequence[object]]
) -> str:
    """Writes `rel` under the audit root and returns its URL."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows(rows)
    return write_bytes(roots, rel, text.getvalue().encode())


def write_bytes(roots: CheckpointRootsResource, rel: str, data: bytes) -> str:
    storage = audit_root(roots)
    storage.write(rel, data)
    return storage.full(rel) if storage.protocol == "file" else f"{storage.url}/{rel}"
