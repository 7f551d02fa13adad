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

import dagster as dg
import humanfriendly
import pandas as pd
from pydantic import Field

from assets import markdown
from assets.checkpoints import (
    FLEET_ASSET,
    GROUP,
)
from assets.fleet_chart import attention_markdown, chart_svg
from assets.history import MaintenanceHistory
from assets.partitions import CHECKPOINTS
from assets.reports import write_bytes
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import (
    FleetRow,
    Severity,
    headroom,
    human_bytes,
    look_at,
    ranked,
    shown,
    spark_line,
    totals,
    unreadable_row,
    utc_minute,
    with_held,
)
from checkpoint.errors import UnknownSparkVersion
from checkpoint.model import each_checkpoint
from checkpoint.policy import POLICY
from checkpoint.storage import Storage

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
    held: bool = Field(
        default=False,
        description="Also list each dormant checkpoint whose bytes its audit trail does not know yet (once "
        "per dormancy, kept there); default: only what the trails know, no checkpoint listed",
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


def _rows(
    roots: CheckpointRootsResource, keys: list[str], history: MaintenanceHistory, target: str | None
) -> list[FleetRow]:
    """Every checkpoint's row, side by side (`each_checkpoint`: threads on object stores, worker
    processes on local disks), most urgent first."""
    policy = roots.policy()
    storages = roots.opened()
    looks = []
    for key in keys:
        site = roots.site(key, storages)
        audit = (site.audit_url, site.audit_options)  # the trail's URL told only for a dormant one
        looks.append((key, site.storage.url, site.root.storage_options, policy, history.known(key), target,
                      audit))  # fmt: skip
    width = max((s.width(POLICY.fleet_workers) for s in storages.values()), default=1)
    timeout = max((s.look_timeout() for s in storages.values()), default=POLICY.look_timeout_seconds)
    return ranked(each_checkpoint(_look, looks, width=width, timed_out=_timed_out, timeout=timeout), policy)


def _look(item: tuple) -> FleetRow:
    key, url, options, policy, known, target, (audit_url, audit_options) = item
    # a dormant checkpoint's bytes, as its audit trail knows them (`held` lists the others after)
    return with_held(look_at(key, url, options, policy, known, target), Storage(url, options), audit_url,
                     audit_options)  # fmt: skip


def _held(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource, rows: list[FleetRow]
) -> list[FleetRow]:
    """The rows, each dormant one whose bytes its audit trail does not know listed (once per
    dormancy: kept there), one after another after the looks, which are bounded in time: a
    listing takes what the checkpoint holds."""
    unknown = [r for r in rows if r.held_unknown]
    context.log.info(f"listing {len(unknown)} dormant checkpoint(s) whose bytes are not known yet")
    listed = {}
    for at, row in enumerate(unknown, 1):
        site = roots.site(row.key)
        listed[row.key] = with_held(row, site.storage, site.audit_url, site.audit_options, listing=True)
        context.log.info(f"listed {at} of {len(unknown)}: {row.key}")
    return [listed.get(r.key, r) for r in rows]


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
    rows = _rows(roots, keys, MaintenanceHistory(context.instance, keys), target or None)
    if config.held:
        rows = ranked(_held(context, roots, rows), roots.policy())
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
