"""The fleet view as an asset: the health of every checkpoint partition in one place.

Not partitioned: one materialisation reads every partition head-first (the logs and what recovery
reads, concurrently), and takes what only Dagster knows from its own records: the bytes the last
cleanup plan of each checkpoint found, and when compaction and cleanup last ran and how.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import dagster as dg
import humanfriendly
import pandas as pd
from pydantic import Field

from assets import markdown
from assets.checkpoints import (
    FLEET_ASSET,
    GROUP,
    INVENTORY_ASSET,
    LAST_REHEARSAL,
    REHEARSAL_BATCH,
    REHEARSAL_SPARK,
)
from assets.expiry import ASSET as EXPIRED_ASSET
from assets.partitions import CHECKPOINTS, parse_partition_key
from assets.ranges import value_for
from assets.reports import write_bytes
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import (
    FleetRow,
    Severity,
    headroom,
    human_bytes,
    look_at,
    needs_attention,
    ranked,
    shown,
    spark_line,
    totals,
    unreadable_row,
    utc_minute,
)
from checkpoint.cleanup import with_held
from checkpoint.errors import UnknownSparkVersion
from checkpoint.model import each_checkpoint
from checkpoint.policy import POLICY, Policy
from checkpoint.storage import Storage

_PLAN, _COMPACTION, _CLEANUP = "checkpoint_orphan_plan", "checkpoint_compaction", "checkpoint_orphan_cleanup"
_COMPACTION_JOBS: tuple[str, ...] = ("compact_checkpoints", "checkpoint_maintenance")
_CLEANUP_JOBS: tuple[str, ...] = ("checkpoint_cleanup", "checkpoint_maintenance")
NO_ERRORS_CHECK = "fleet_no_errors"
HEADROOM_CHECK = "fleet_lineage_headroom"
_COLUMNS = [  # (name, Dagster column type) of the table shown in the UI
    ("checkpoint", "string"), ("state", "string"), ("latest_batch", "int"), ("commit_age", "string"),
    ("live", "bool"), ("errors", "string"), ("warnings", "string"), ("max_chain", "int"),
    ("chain_store", "string"), ("header_of_cap", "float"), ("reclaimable", "string"),
    ("last_compaction", "string"), ("last_cleanup", "string"), ("last_rehearsal", "string"),
    ("restarts_on_target", "string"), ("dormant_since", "string"), ("expired", "string"),
]  # fmt: skip


class FleetReportConfig(dg.Config):
    """What a Launchpad run may ask besides the deployment's setting: only reads, never a root."""

    target_spark: str = Field(
        default="",
        description="Also tell whether this Spark (4.0 to 4.3) restarts each checkpoint; default: the "
        "deployment's CKPT_TARGET_SPARK",
    )


def _idle(row: FleetRow) -> str:
    if row.idle_since is None:
        return "-"
    notes = [
        note
        for note in (
            "stopped mid-batch" if row.stopped_mid_batch_since is not None else None,
            None if row.bytes_held is None else f"{human_bytes(row.bytes_held)} held",
        )
        if note
    ]
    return utc_minute(row.idle_since) + (f" ({', '.join(notes)})" if notes else "")


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
    """What this Dagster instance recorded about every checkpoint's maintenance, read in bulk: for
    each asset the newest materialization of every partition (one query for their ids, then the
    records a thousand at a time), the newest restart rehearsal of each (the same, for the
    inventory's observations), and the failed maintenance runs of each job (one query each).
    Asked per checkpoint, that was five queries a checkpoint: 50,000 at 10,000 checkpoints."""

    _CHUNK = 1000
    _FAILED_RUNS = 5000  # per job, newest first: a failure older than its job's 5,000 newest is not shown

    def __init__(self, instance: dg.DagsterInstance, keys: list[str]):
        self.instance = instance
        wanted = set(keys)
        assets = (_PLAN, _COMPACTION, _CLEANUP, EXPIRED_ASSET)
        self.latest = {asset: self._latest(asset, wanted) for asset in assets}
        self.rehearsals = self._latest(INVENTORY_ASSET, wanted, observed=True)
        self.failed = {jobs: self._failed(jobs, wanted) for jobs in (_COMPACTION_JOBS, _CLEANUP_JOBS)}

    def _latest(self, asset: str, keys: set[str], observed: bool = False) -> dict[str, Any]:
        key = dg.AssetKey(asset)
        event = (
            dg.DagsterEventType.ASSET_OBSERVATION if observed else dg.DagsterEventType.ASSET_MATERIALIZATION
        )
        fetch = self.instance.fetch_observations if observed else self.instance.fetch_materializations
        ids = self.instance.get_latest_storage_id_by_partition(key, event, keys)
        by_id = {storage_id: partition for partition, storage_id in ids.items()}
        found: dict[str, Any] = {}
        wanted = sorted(by_id)
        for i in range(0, len(wanted), self._CHUNK):
            chunk = wanted[i : i + self._CHUNK]
            got = fetch(dg.AssetRecordsFilter(asset_key=key, storage_ids=chunk), limit=len(chunk)).records
            found.update((by_id[r.storage_id], r) for r in got)
        return found

    def _failed(self, jobs: tuple[str, ...], keys: set[str]) -> dict[str, float]:
        newest: dict[str, float] = {}
        for job in jobs:
            runs = self.instance.get_run_records(
                dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.FAILURE]), limit=self._FAILED_RUNS
            )
            for r in runs:
                key = r.dagster_run.tags.get("dagster/partition")
                if key in keys and r.end_time is not None and r.end_time > newest.get(key, 0.0):
                    newest[key] = r.end_time
        return newest

    def known(self, key: str) -> dict:
        plan = self.latest[_PLAN].get(key)
        compaction = self.latest[_COMPACTION].get(key)
        cleanup = self.latest[_CLEANUP].get(key)
        reclaimable = _int(plan, key, "bytes")
        if (
            reclaimable is not None
            and plan is not None
            and cleanup is not None
            and cleanup.timestamp >= plan.timestamp
        ):
            # the plan's bytes, less what a cleanup applied after it deleted: what is left to reclaim
            deleted = _int_of(cleanup.asset_materialization.metadata, key, "deleted_bytes")
            reclaimable = max(0, reclaimable - deleted)
        rehearsal = self.rehearsals.get(key)
        expired = self.latest[EXPIRED_ASSET].get(key)
        return {
            "expired": _int(expired, key, "expired"),
            "expired_share": _share(expired, key),
            "expired_bytes": _int(expired, key, "expired_bytes"),
            "last_rehearsal": None if rehearsal is None else _rehearsal(rehearsal),
            "reclaimable_bytes": reclaimable,
            "reclaimable_planned_at": plan.timestamp if plan is not None else None,
            "last_compaction": self._describe(
                compaction, _COMPACTION_JOBS, key,
                lambda m: f"{_int_of(m, key, 'stores_compacted')} stores compacted",
            ),
            "last_cleanup": self._describe(
                cleanup, _CLEANUP_JOBS, key,
                lambda m: (f"deleted {_int_of(m, key, 'deleted_files')} files" if value_for(m, key, "applied")
                           else "dry run"),
            ),
        }  # fmt: skip

    def _describe(self, record, jobs: tuple[str, ...], key: str, what) -> str | None:
        failed = self.failed[jobs].get(key)
        if failed is not None and failed > (record.timestamp if record else 0.0):
            return f"{utc_minute(failed)}: FAILED"
        if record is None:
            return None
        return f"{utc_minute(record.timestamp)}: {what(record.asset_materialization.metadata)}"


def _rehearsal(record) -> str:
    meta = {k: v.value for k, v in record.asset_observation.metadata.items()}
    return (f"{utc_minute(record.timestamp)}: {meta.get(LAST_REHEARSAL)} (Spark {meta.get(REHEARSAL_SPARK)}, "
            f"batch {meta.get(REHEARSAL_BATCH)})")  # fmt: skip


def _int_of(metadata: dict, key: str, name: str) -> int:
    value = value_for(metadata, key, name)
    return int(value) if isinstance(value, int | float) else 0


def _share(record, key: str) -> float | None:
    value = None if record is None else value_for(record.asset_materialization.metadata, key, "expired_share")
    return float(value) if isinstance(value, int | float) else None


def _int(record, key: str, name: str) -> int | None:
    """A checkpoint's own figure (`value_for`: a range's materialization holds each one's)."""
    if record is None:
        return None
    value = value_for(record.asset_materialization.metadata, key, name)
    return int(value) if isinstance(value, int | float) else None


def _rows(
    roots: CheckpointRootsResource, keys: list[str], history: _History, target: str | None
) -> list[FleetRow]:
    """Every checkpoint's row, side by side (`each_checkpoint`: threads on object stores, worker
    processes on local disks), most urgent first."""
    policy = roots.policy()
    storages = {r.name: roots.storage(r.name) for r in roots.roots}
    looks = []
    for key in keys:
        name, rel = parse_partition_key(key)
        options = roots.root(name).storage_options
        audit = (roots.audit_url, roots.audit_options(name))  # the trail's URL told only for a dormant one
        looks.append((key, storages[name].child(rel).url, options, policy, history.known(key), target, audit))
    latency_bound = any(s.backend.latency_bound for s in storages.values())
    return ranked(each_checkpoint(_look, looks, latency_bound=latency_bound, timed_out=_timed_out), policy)


def _look(item: tuple) -> FleetRow:
    key, url, options, policy, known, target, (audit_url, audit_options) = item
    # a dormant checkpoint's bytes: listed once per dormancy, kept in its audit trail
    return with_held(look_at(key, url, options, policy, known, target), Storage(url, options), audit_url,
                     audit_options)  # fmt: skip


def _timed_out(item: tuple, timeout: float) -> FleetRow:
    key, url, _, _, known, _, _ = item
    return unreadable_row(key, url, f"no answer in {timeout:g} s: the look was abandoned", **known)


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
                "last_rehearsal": r.last_rehearsal or "never",
                "restarts_on_target": r.readiness.label if r.readiness else "-",
                "expired": "-"
                if r.expired is None
                else (f"{r.expired:,} ({r.expired_share or 0:.0%}, {human_bytes(r.expired_bytes or 0)})"),
                "dormant_since": _idle(r),
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
    context: dg.AssetExecutionContext, config: FleetReportConfig, roots: CheckpointRootsResource
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """One row per checkpoint: latest batch and its age, live or stopped, findings, the longest replay
    chain, lineage-header headroom, reclaimable bytes, the last compaction, cleanup and rehearsal,
    and with a target Spark whether it restarts there (docs/format.md, upgrade readiness)."""
    target = config.target_spark or roots.target_spark
    if target:
        try:
            target = spark_line(target)
        except UnknownSparkVersion as exc:
            raise dg.Failure(str(exc)) from exc
    keys = sorted(context.instance.get_dynamic_partitions(CHECKPOINTS))
    rows = _rows(roots, keys, _History(context.instance, keys), target or None)
    context.log.info(f"read {len(rows)} checkpoints head-first")
    fleet = totals(rows, target or None)
    chart = _write_chart(context, rows, roots)
    frame = pd.DataFrame([r.as_dict() for r in rows])
    # The UI shows the most urgent rows of each kind of need; every row is in the file (a table
    # event of 10,000 rows would be megabytes in the instance's database, each run).
    table_rows, per_need = shown(rows, POLICY.fleet_table_rows, roots.policy())
    yield dg.Output(
        frame,
        metadata={
            "checkpoints": fleet.checkpoints,
            "unhealthy_checkpoints": fleet.unhealthy,
            "longest_chain": fleet.longest_chain,
            "reclaimable_bytes": fleet.reclaimable_bytes,
            "worst_header_fraction": round(fleet.worst_header_fraction, 4),
            "dormant_checkpoints": fleet.dormant,
            "stopped_mid_batch_checkpoints": fleet.stopped_mid_batch,
            "dormant_bytes": fleet.dormant_bytes,
            **_readiness_metadata(fleet.readiness),
            "fleet": _table(table_rows),
            "rows_not_shown": len(rows) - len(table_rows),
            "shown_per_need": dg.MetadataValue.md(markdown.table(("need", "rows shown"), per_need.items())),
            "fleet_table": dg.MetadataValue.path(_write_table(context, frame, roots)),
            "needs_attention": dg.MetadataValue.md(attention_markdown(rows, roots.policy())),
            "chart": dg.MetadataValue.path(str(chart)),
            # The same SVG, shown on the asset's page (the UI renders a Markdown image in place).
            "chart_image": dg.MetadataValue.md(
                f"![fleet chart](data:image/svg+xml;base64,{base64.b64encode(chart.read_bytes()).decode()})"
            ),
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


def _readiness_metadata(counts: dict) -> dict:
    """The counts under the target Spark (`totals`), when one was asked."""
    if not counts:
        return {}
    return {"target_spark": counts["target"], "restart_on_target": counts["yes"],
            "refused_on_target": counts["no"], "unknown_on_target": counts["unknown"],
            "actions_refused_on_target": dg.MetadataValue.json(counts["actions_refused"])}  # fmt: skip


def _write_chart(context: dg.AssetExecutionContext, rows: list[FleetRow], roots) -> Path:
    """The SVG beside the instance's other files: one per run, and `latest.svg` for a bookmark."""
    folder = Path(context.instance.storage_directory()) / "fleet"
    folder.mkdir(parents=True, exist_ok=True)
    svg = chart_svg(rows, roots.policy())
    (folder / "latest.svg").write_text(svg)
    path = folder / f"{context.run.run_id}.svg"
    path.write_text(svg)
    return path


def _write_table(context: dg.AssetExecutionContext, frame: pd.DataFrame, roots) -> str:
    """Every row, most urgent first, as `fleet/<run id>.csv` in the audit root; returns its URL."""
    flat = (
        frame.assign(**{c: frame[c].map(", ".join) for c in ("errors", "warnings")}) if len(frame) else frame
    )
    return write_bytes(roots, f"fleet/{context.run.run_id}.csv", flat.to_csv(index=False).encode())


def attention_markdown(rows: list[FleetRow], policy: Policy = POLICY, limit: int = 10) -> str:
    items = needs_attention(rows, policy, limit)
    if not items:
        return f"All {len(rows)} checkpoints are healthy: nothing needs attention."
    cells = [(i, f"`{a.row.key}`", a.reason, a.action) for i, a in enumerate(items, 1)]
    return markdown.table(("#", "checkpoint", "why", "what fixes it"), cells)


_HISTOGRAM_HEIGHT, _BINS = 110, 30


def _chain_histogram(rows: list[FleetRow], policy: Policy, width: int) -> list[str]:
    """SVG parts of a histogram over every checkpoint, however many: how many replay a chain of
    each length, the bins at or past the policy's threshold in red."""
    longest = max([policy.long_chain, *(r.max_chain_length for r in rows)])
    step = -(-(longest + 1) // _BINS)
    counts = [0] * (-(-(longest + 1) // step))
    for r in rows:
        counts[r.max_chain_length // step] += 1
    tallest = max(counts, default=0) or 1
    left, span = 40, width - 60
    w = span / len(counts)
    parts = [f'<text x="10" y="14">{len(rows)} checkpoints by their longest replay chain '
             f"(bins of {step}; red: at or past {policy.long_chain})</text>"]  # fmt: skip
    base = _HISTOGRAM_HEIGHT + 4
    for i, n in enumerate(counts):
        h = (_HISTOGRAM_HEIGHT - 30) * n / tallest
        colour = "#e74c3c" if (i + 1) * step > policy.long_chain else "#95a5a6"
        x = left + i * w
        tip = f"chain {i * step}-{(i + 1) * step - 1}: {n}"
        parts.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{max(w - 1, 1):.1f}" height="{h:.1f}" '
                     f'fill="{colour}"><title>{tip}</title></rect>')  # fmt: skip
        if n:
            parts.append(f'<text x="{x + w / 2:.1f}" y="{base - h - 2:.1f}" text-anchor="middle" '
                         f'font-size="9">{n}</text>')  # fmt: skip
    parts.append(f'<text x="{left}" y="{base + 12}" font-size="9">0</text>')
    parts.append(f'<text x="{left + span}" y="{base + 12}" font-size="9" text-anchor="end">{longest}</text>')
    return parts


def chart_svg(rows: list[FleetRow], policy: Policy = POLICY, width: int = 900) -> str:
    """Two horizontal bars per checkpoint (longest chain, reclaimable bytes), most urgent first: an
    SVG a browser shows as is, with no plotting library to install."""
    histogram = _chain_histogram(rows, policy, width)
    every = len(rows)
    rows = ranked(rows, policy)[:40]
    bar, gap, label = 9, 8, 260
    head = _HISTOGRAM_HEIGHT + 24
    height = head + 40 + len(rows) * (2 * bar + gap)
    chain_max = max([policy.long_chain, *(r.max_chain_length for r in rows)])
    bytes_max = max([1, *((r.reclaimable_bytes or 0) for r in rows)])
    span = width - label - 120
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        *histogram,
        f'<text x="10" y="{head + 14}">the {len(rows)} most urgent of {every}, by need</text>',
        f'<text x="{label}" y="{head + 28}" fill="#c0392b">chain length (changelogs replayed)</text>',
        f'<text x="{label + 260}" y="{head + 28}" fill="#2e86c1">reclaimable bytes</text>',
    ]
    threshold = label + span * policy.long_chain / chain_max
    parts.append(f'<line x1="{threshold:.1f}" y1="{head + 34}" x2="{threshold:.1f}" y2="{height}" '
                 'stroke="#c0392b" stroke-dasharray="3,3"/>')  # fmt: skip
    for i, row in enumerate(rows):
        y = head + 42 + i * (2 * bar + gap)
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
