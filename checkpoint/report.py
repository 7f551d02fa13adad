"""Plain-data summaries of a checkpoint, shared by the CLI and (later) the Dagster layer."""

from __future__ import annotations

from typing import Any

from .model import Checkpoint


def inspect_summary(ckpt: Checkpoint) -> dict[str, Any]:
    """The `ckpt inspect --json` document."""
    return {
        "path": ckpt.url,
        "format_version": ckpt.format_version,
        "query_id": ckpt.query_id,
        "latest_planned_batch": ckpt.latest_planned_batch,
        "latest_committed_batch": ckpt.latest_committed_batch,
        "operators": [
            {"id": op.id, "name": op.name, "stores": list(op.store_names), "partitions": op.num_partitions}
            for op in ckpt.operators.values()
        ],
        "files": ckpt.count_by_kind(),
        "bytes": ckpt.bytes,
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
