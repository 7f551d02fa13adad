"""Plain-data summaries of a checkpoint, shared by the CLI and (later) the Dagster layer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from .lineage import StoreLineage
from .model import Checkpoint
from .validate import Validation


def _identity(ckpt: Checkpoint) -> dict[str, Any]:
    return {
        "path": ckpt.url,
        "format_version": ckpt.format_version,
        "query_id": ckpt.query_id,
        "latest_planned_batch": ckpt.latest_planned_batch,
        "latest_committed_batch": ckpt.latest_committed_batch,
    }


def inspect_summary(ckpt: Checkpoint) -> dict[str, Any]:
    """The `ckpt inspect --json` document."""
    return {
        **_identity(ckpt),
        "operators": [
            {"id": op.id, "name": op.name, "stores": list(op.store_names), "partitions": op.num_partitions}
            for op in ckpt.operators.values()
        ],
        "files": ckpt.count_by_kind(),
        "bytes": ckpt.bytes,
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
        "bytes": ckpt.bytes,
        "stores": len(ckpt.stores),
    }


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_inspect(summary: dict[str, Any]) -> str:
    def batch(n):
        return "none" if n is None else str(n)

    lines = [
        f"checkpoint   {summary['path']}",
        f"format       V{summary['format_version']}   query id {summary['query_id'] or 'unknown'}",
        f"batches      latest planned {batch(summary['latest_planned_batch'])}, "
        f"latest committed {batch(summary['latest_committed_batch'])}",
        f"size         {human_bytes(summary['bytes'])} in {sum(summary['files'].values())} files",
        "operators",
    ]
    if not summary["operators"]:
        lines.append("  (stateless query)")
    for op in summary["operators"]:
        stores = ", ".join(op["stores"])
        lines.append(f"  {op['id']}  {op['name'] or '?'}  partitions {op['partitions']}  stores {stores}")
    lines.append("files")
    width = max((len(k) for k in summary["files"]), default=0)
    lines += [f"  {kind:<{width}}  {count}" for kind, count in summary["files"].items()]
    return "\n".join(lines)


def lineage_document(lineage: Iterable[StoreLineage]) -> dict[str, Any]:
    """The `ckpt lineage --json` document."""
    return {"stores": [entry.as_dict() for entry in lineage]}


def format_lineage(doc: dict[str, Any]) -> str:
    rows = [("op", "part", "store", "version", "snapshot", "chain", "replay", "header")]
    for s in doc["stores"]:
        snap = "-" if s["snapshot_version"] is None else str(s["snapshot_version"])
        rows.append(
            (str(s["operator"]), str(s["partition"]), s["store"], str(s["version"]), snap,
             str(s["chain_length"]), human_bytes(s["replay_bytes"]), f"{s['lineage_header_bytes']} B")
        )  # fmt: skip
    return _table(rows)


def validation_document(validation: Validation) -> dict[str, Any]:
    """The `ckpt validate --json` document."""
    return {"ok": validation.ok, "findings": [f.as_dict() for f in validation.findings]}


def format_validation(doc: dict[str, Any]) -> str:
    if not doc["findings"]:
        return "ok: no findings"
    lines = [
        f"{f['severity'].upper():7}  {f['code']}  {f['path']}\n         {f['message']}"
        for f in doc["findings"]
    ]
    counts = Counter(f["severity"] for f in doc["findings"])
    verdict = "ok" if doc["ok"] else "NOT OK"
    lines.append(f"{verdict}: " + ", ".join(f"{n} {sev}" for sev, n in sorted(counts.items())))
    return "\n".join(lines)


def scan_entry(url: str, ckpt: Checkpoint | None, validation: Validation | None, error: str | None) -> dict:
    """One checkpoint of `ckpt scan --json`; `error` when it could not be read at all."""
    counts = Counter(f.severity.value for f in validation.findings) if validation else Counter()
    return {
        "path": url,
        "format_version": ckpt.format_version if ckpt else None,
        "latest_committed_batch": ckpt.latest_committed_batch if ckpt else None,
        "health": "unreadable" if error else ("ok" if validation and validation.ok else "error"),
        "errors": counts["error"],
        "warnings": counts["warning"],
        "max_chain_length": max((e.chain_length for e in validation.lineage), default=0)
        if validation
        else None,
        "error": error,
    }


def format_scan(doc: dict[str, Any]) -> str:
    if not doc["checkpoints"]:
        return f"no checkpoints under {doc['root']}"
    rows = [("checkpoint", "format", "committed", "health", "errors", "warnings", "max chain")]
    for c in doc["checkpoints"]:
        batch = "-" if c["latest_committed_batch"] is None else str(c["latest_committed_batch"])
        rows.append(
            (c["path"], f"V{c['format_version']}" if c["format_version"] else "-", batch, c["health"],
             str(c["errors"]), str(c["warnings"]), str(c["max_chain_length"] or 0))
        )  # fmt: skip
    return _table(rows)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
