"""The fleet view as an asset: the health of every checkpoint partition in one place.

Not partitioned: one materialisation reads every partition head-first (the logs and what recovery
reads, concurrently), and takes what only Dagster knows from its own records: the bytes the last
cleanup plan of each checkpoint found, and when compaction and cleanup last ran and how.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from xml.sax.saxutils import escape

import dagster as dg
import humanfriendly
import pandas as pd

from assets import markdown
from assets.checkpoints import FLEET_ASSET, GROUP
from assets.partitions import CHECKPOINTS
from assets.resources import CheckpointRootsResource
from checkpoint.analysis.fleet import (
    FleetRow,
    fleet_row,
    headroom,
    needs_attention,
    ranked,
    totals,
    unreadable_row,
)
from checkpoint.analysis.report import human_bytes
from checkpoint.analysis.validate import Severity
from checkpoint.errors import CheckpointError
from checkpoint.policy import POLICY, Policy

NO_ERRORS_CHECK = "fleet_no_errors"
HEADROOM_CHECK = "fleet_lineage_headroom"
_COLUMNS = [  # (name, Dagster column type) of the table shown in the UI
    ("checkpoint", "string"), ("state", "string"), ("latest_batch", "int"), ("commit_age", "string"),
    ("live", "bool"), ("errors", "string"), ("warnings", "string"), ("max_chain", "int"),
    ("chain_store", "string"), ("header_of_cap", "float"), ("reclaimable", "string"),
    ("last_compaction", "string"), ("last_cleanup", "string"),
]  # fmt: skip


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _reclaimable(row: FleetRow) -> str:
    if row.reclaimable_bytes is None:
        return "unknown"
    if row.reclaimable_planned_at is None:
        return human_bytes(row.reclaimable_bytes)
    age = _age(time.time() - row.reclaimable_planned_at)
    return f"{human_bytes(row.reclaimable_bytes)} (planned {age} ago)"


def _age(seconds: float | None) -> str:
    return "never" if seconds is None else humanfriendly.format_timespan(seconds, max_units=2)


class _History:
    """What this Dagster instance recorded about one checkpoint's maintenance."""

    def __init__(self, instance: dg.DagsterInstance):
        self.instance = instance

    def _latest(self, asset: str, key: str):
        found = self.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=1
        ).records
        return found[0] if found else None

    def _failed_since(self, jobs: tuple[str, ...], key: str, since: float) -> float | None:
        runs = self.instance.get_run_records(
            dg.RunsFilter(tags={"dagster/partition": key}, statuses=[dg.DagsterRunStatus.FAILURE]), limit=20
        )
        ended = (r.end_time for r in runs if r.dagster_run.job_name in jobs)
        times = [t for t in ended if t is not None and t > since]
        return max(times, default=None)

    def known(self, key: str) -> dict:
        plan = self._latest("checkpoint_orphan_plan", key)
        compaction = self._latest("checkpoint_compaction", key)
        cleanup = self._latest("checkpoint_orphan_cleanup", key)
        reclaimable = _int(plan, "bytes")
        if reclaimable is not None and cleanup is not None and cleanup.timestamp >= plan.timestamp:
            # the plan's bytes, less what a cleanup applied after it deleted: what is left to reclaim
            deleted = _int_of(cleanup.asset_materialization.metadata, "deleted_bytes")
            reclaimable = max(0, reclaimable - deleted)
        return {
            "reclaimable_bytes": reclaimable,
            "reclaimable_planned_at": plan.timestamp if plan is not None else None,
            "last_compaction": self._describe(
                compaction, ("compact_checkpoints", "checkpoint_maintenance"), key,
                lambda m: f"{_int_of(m, 'stores_compacted')} stores compacted",
            ),
            "last_cleanup": self._describe(
                cleanup, ("cleanup_checkpoints", "checkpoint_maintenance"), key,
                lambda m: (f"deleted {_int_of(m, 'deleted_files')} files" if _value(m, "applied")
                           else "dry run"),
            ),
        }  # fmt: skip

    def _describe(self, record, jobs: tuple[str, ...], key: str, what) -> str | None:
        since = record.timestamp if record else 0.0
        failed = self._failed_since(jobs, key, since)
        if failed is not None:
            return f"{_when(failed)}: FAILED"
        if record is None:
            return None
        return f"{_when(record.timestamp)}: {what(record.asset_materialization.metadata)}"


def _value(metadata: dict, name: str):
    entry = metadata.get(name)
    return getattr(entry, "value", None)


def _int_of(metadata: dict, name: str) -> int:
    return int(_value(metadata, name) or 0)


def _int(record, name: str) -> int | None:
    if record is None:
        return None
    value = _value(record.asset_materialization.metadata, name)
    return None if value is None else int(value)


def _row(roots: CheckpointRootsResource, key: str, known: dict) -> FleetRow:
    try:
        return fleet_row(key, roots.load(key), roots.policy(), **known)
    except CheckpointError as exc:  # one unreadable checkpoint is a row, never a failed report
        return unreadable_row(key, roots.url_of(key), str(exc), **known)


def _or(value, default):
    return default if value is None else value


def _table(rows: list[FleetRow]) -> dg.TableMetadataValue:
    records = [
        dg.TableRecord(
            {
                "checkpoint": r.key,
                "state": r.state_format or "-",
                "latest_batch": -1 if r.latest_committed_batch is None else r.latest_committed_batch,
                "commit_age": _age(r.last_commit_age_seconds),
                "live": r.live,
                "errors": ", ".join(r.errors) or "-",
                "warnings": ", ".join(r.warnings) or "-",
                "max_chain": r.max_chain_length,
                "chain_store": r.max_chain_store or "-",
                "header_of_cap": round(r.max_lineage_header_fraction, 3),
                "reclaimable": _reclaimable(r),
                "last_compaction": r.last_compaction or "never",
                "last_cleanup": r.last_cleanup or "never",
            }
        )  # fmt: skip
        for r in rows
    ]
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in _COLUMNS])
    return dg.MetadataValue.table(records, schema=schema)


@dg.asset(
    group_name=GROUP,
    kinds={"pandas"},
    check_specs=[
        dg.AssetCheckSpec(NO_ERRORS_CHECK, asset=FLEET_ASSET, description="No checkpoint has error findings"),
        dg.AssetCheckSpec(
            HEADROOM_CHECK, asset=FLEET_ASSET,
            description=f"Every lineage header below {POLICY.fleet_header_warn_ratio:.0%} of the cap (WARN) "
                        "and "
                        f"{POLICY.header_cap_ratio:.0%} (ERROR)",
        ),
    ],
)  # fmt: skip
def checkpoint_fleet_report(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """One row per checkpoint: latest batch and its age, live or stopped, findings, the longest replay
    chain, lineage-header headroom, reclaimable bytes, and the last compaction and cleanup."""
    keys = sorted(context.instance.get_dynamic_partitions(CHECKPOINTS))
    history = _History(context.instance)
    known = {key: history.known(key) for key in keys}
    with ThreadPoolExecutor(POLICY.fleet_workers) as pool:
        rows = ranked(list(pool.map(lambda k: _row(roots, k, known[k]), keys)), roots.policy())
    context.log.info(f"read {len(rows)} checkpoints head-first")
    fleet = totals(rows)
    chart = _write_chart(context, rows, roots)
    yield dg.Output(
        pd.DataFrame([r.as_dict() for r in rows]),
        metadata={
            "checkpoints": fleet.checkpoints,
            "unhealthy_checkpoints": fleet.unhealthy,
            "longest_chain": fleet.longest_chain,
            "reclaimable_bytes": fleet.reclaimable_bytes,
            "worst_header_fraction": round(fleet.worst_header_fraction, 4),
            "fleet": _table(rows),
            "needs_attention": dg.MetadataValue.md(attention_markdown(rows, roots.policy())),
            "chart": dg.MetadataValue.path(str(chart)),
        },
    )
    unhealthy = [r for r in rows if r.errors]
    yield dg.AssetCheckResult(
        check_name=NO_ERRORS_CHECK,
        passed=not unhealthy,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "unhealthy": len(unhealthy),
            "checkpoints": dg.MetadataValue.md(
                "\n".join(f"- `{r.key}`: {', '.join(r.errors)}" for r in unhealthy[:50]) or "none"
            ),
        },
    )
    worst = max(rows, key=lambda r: r.max_lineage_header_fraction, default=None)
    fraction = worst.max_lineage_header_fraction if worst else 0.0
    level = headroom(fraction, roots.policy())
    yield dg.AssetCheckResult(
        check_name=HEADROOM_CHECK,
        passed=level is None,
        severity=dg.AssetCheckSeverity.ERROR if level == Severity.ERROR else dg.AssetCheckSeverity.WARN,
        metadata={"worst_fraction": round(fraction, 4), "checkpoint": worst.key if worst else "none"},
    )


def _write_chart(context: dg.AssetExecutionContext, rows: list[FleetRow], roots) -> Path:
    """The SVG beside the instance's other files: one per run, and `latest.svg` for a bookmark."""
    folder = Path(context.instance.storage_directory()) / "fleet"
    folder.mkdir(parents=True, exist_ok=True)
    svg = chart_svg(rows, roots.policy())
    (folder / "latest.svg").write_text(svg)
    path = folder / f"{context.run.run_id}.svg"
    path.write_text(svg)
    return path


def attention_markdown(rows: list[FleetRow], policy: Policy = POLICY, limit: int = 10) -> str:
    items = needs_attention(rows, policy, limit)
    if not items:
        return f"All {len(rows)} checkpoints are healthy: nothing needs attention."
    cells = [(i, f"`{a.row.key}`", a.reason, a.action) for i, a in enumerate(items, 1)]
    return markdown.table(("#", "checkpoint", "why", "what fixes it"), cells)


def chart_svg(rows: list[FleetRow], policy: Policy = POLICY, width: int = 900) -> str:
    """Two horizontal bars per checkpoint (longest chain, reclaimable bytes), most urgent first: an
    SVG a browser shows as is, with no plotting library to install."""
    rows = ranked(rows, policy)[:40]
    bar, gap, label = 9, 8, 260
    height = 40 + len(rows) * (2 * bar + gap)
    chain_max = max([policy.long_chain, *(r.max_chain_length for r in rows)])
    bytes_max = max([1, *((r.reclaimable_bytes or 0) for r in rows)])
    span = width - label - 120
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{label}" y="14" fill="#c0392b">chain length (changelogs replayed)</text>',
        f'<text x="{label + 260}" y="14" fill="#2e86c1">reclaimable bytes</text>',
    ]
    threshold = label + span * policy.long_chain / chain_max
    parts.append(f'<line x1="{threshold:.1f}" y1="20" x2="{threshold:.1f}" y2="{height}" stroke="#c0392b" '
                 'stroke-dasharray="3,3"/>')  # fmt: skip
    for i, row in enumerate(rows):
        y = 28 + i * (2 * bar + gap)
        name = row.key if len(row.key) <= 38 else "…" + row.key[-37:]
        colour = "#c0392b" if row.errors else "#333"
        parts.append(
            f'<text x="{label - 6}" y="{y + bar + 3}" text-anchor="end" fill="{colour}">{escape(name)}</text>'
        )
        chain_w = span * row.max_chain_length / chain_max
        bytes_w = span * (row.reclaimable_bytes or 0) / bytes_max
        parts.append(f'<rect x="{label}" y="{y}" width="{chain_w:.1f}" height="{bar}" fill="#e74c3c"/>')
        parts.append(f'<text x="{label + chain_w + 4:.1f}" y="{y + bar - 1}">{row.max_chain_length}</text>')
        parts.append(f'<rect x="{label}" y="{y + bar}" width="{bytes_w:.1f}" height="{bar}" fill="#5dade2"/>')
        shown = "unknown" if row.reclaimable_bytes is None else human_bytes(row.reclaimable_bytes)
        parts.append(f'<text x="{label + bytes_w + 4:.1f}" y="{y + 2 * bar - 1}">{shown}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
