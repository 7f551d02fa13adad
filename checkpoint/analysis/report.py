"""Plain-data summaries of a checkpoint (the documents `--json` prints and Dagster records), the
one spelling of a byte size the adapters show, and names made safe to print; the adapters render
them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import humanfriendly

from checkpoint.analysis.checks import Validation
from checkpoint.model import Census, Checkpoint, StoreLineage

# Control characters (C0, DEL, C1: newline, CR, tab, ESC and the 8-bit CSI of ANSI sequences) as
# Python writes them in a literal, so a folder named to forge a row or move the cursor prints as
# its name, on one line.
_CONTROLS = {c: repr(chr(c))[1:-1] for c in (*range(0x20), *range(0x7F, 0xA0))}


def printable(value: Any) -> Any:
    """`value` with every control character in its strings escaped, through lists and dicts: what a
    text output prints of names read from a storage (folders, files, messages naming them)."""
    if isinstance(value, str):
        return value.translate(_CONTROLS)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(printable(v) for v in value)
    return value


def _identity(ckpt: Checkpoint) -> dict[str, Any]:
    return {
        "path": ckpt.url,
        "format_version": ckpt.format_version,
        "provider": ckpt.provider.value,
        "query_id": ckpt.query_id,
        "latest_planned_batch": ckpt.latest_planned_batch,
        "latest_committed_batch": ckpt.latest_committed_batch,
    }


def inspect_summary(ckpt: Checkpoint, census: Census | None = None) -> dict[str, Any]:
    """The `ckpt inspect --json` document: `census` counts the files (`load_census`), else the
    model's own files do."""
    return {
        **_identity(ckpt),
        "operators": [
            {"id": op.id, "name": op.name, "stores": list(op.store_names), "partitions": op.num_partitions}
            for op in ckpt.operators.values()
        ],
        "files": ckpt.count_by_kind() if census is None else census.count,
        "bytes": ckpt.total_bytes if census is None else census.bytes,
    }


def inventory(ckpt: Checkpoint) -> dict[str, Any]:
    """Files and bytes by kind, the latest batches and when the last commit was written."""
    by_kind: dict[str, dict[str, int]] = {}
    for f in ckpt.files:
        entry = by_kind.setdefault(f.kind.value, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += f.info.size
    last_commit = ckpt.last_commit_mtime
    return {
        **_identity(ckpt),
        "last_commit_time": (
            datetime.fromtimestamp(last_commit, tz=timezone.utc).isoformat()
            if last_commit is not None
            else None
        ),
        "files": by_kind,
        "file_count": len(ckpt.files),
        "bytes": ckpt.total_bytes,
        "stores": len(ckpt.stores),
    }


def human_bytes(n: float) -> str:
    """1.5 KiB, 12 MiB: sizes in binary units, the way `ls -h` and S3 consoles show them."""
    return humanfriendly.format_size(n, binary=True)


def lineage_document(lineage: Iterable[StoreLineage]) -> dict[str, Any]:
    """The `ckpt lineage --json` document."""
    return {"stores": [entry.as_dict() for entry in lineage]}


def validation_document(validation: Validation) -> dict[str, Any]:
    """The `ckpt validate --json` document."""
    return {"ok": validation.ok, "findings": [f.as_dict() for f in validation.findings]}


def scan_entry(url: str, ckpt: Checkpoint | None, validation: Validation | None, error: str | None) -> dict:
    """One checkpoint of `ckpt scan --json`; `error` when it could not be read at all."""
    counts = Counter(f.severity.value for f in validation.findings) if validation else Counter()
    return {
        "path": url,
        "format_version": ckpt.format_version if ckpt else None,
        "state_format": ckpt.state_format if ckpt else None,
        "latest_committed_batch": ckpt.latest_committed_batch if ckpt else None,
        "health": "unreadable" if error else ("ok" if validation and validation.ok else "error"),
        "errors": counts["error"],
        "warnings": counts["warning"],
        "max_chain_length": max((e.chain_length for e in validation.lineage), default=0)
        if validation
        else None,
        "error": error,
    }
