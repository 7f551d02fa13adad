"""Read-only assets, one partition per checkpoint: the inventory and the lineage report, with the
blocking checks that must pass before anything changes a checkpoint.

Both read head-first (checkpoint.model.head): the logs and what recovery at the latest committed batch
reads, never a listing of `state/`, so an audit costs the same on a checkpoint with a long history.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
from collections.abc import Iterable, Iterator
from typing import Any

import dagster as dg
import pandas as pd

from assets import markdown
from assets.partitions import checkpoint_partitions
from assets.ranges import BATCHED, each_checkpoint, range_table
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import (
    Category,
    Finding,
    Severity,
    Validation,
    ValidationOptions,
    human_bytes,
    inventory,
    validate,
)
from checkpoint.model import Checkpoint

GROUP = "checkpoint_audit"
# The fleet report is in this group but not partitioned: the per-checkpoint jobs leave it out.
FLEET_ASSET = "checkpoint_fleet_report"
PER_CHECKPOINT_AUDIT = dg.AssetSelection.groups(GROUP) - dg.AssetSelection.assets(FLEET_ASSET)
COMMIT_LOG_CHECK = "commit_log_consistency"
LINEAGE_CHECK = "lineage_completeness"
SNAPSHOT_CHECK = "snapshot_integrity"
INVENTORY_ASSET = "checkpoint_inventory"
# An observation of a checkpoint's inventory that a restart rehearsal records (orchestration/
# rehearsal.py), and the fleet shows: `passed`, or `failed: <outcome>`; the Spark; the batch.
LAST_REHEARSAL, REHEARSAL_SPARK, REHEARSAL_BATCH = (
    "last_rehearsal",
    "last_rehearsal_spark",
    "last_rehearsal_batch",
)
_MAX_ROWS = 25  # a markdown table longer than this is not read at a glance


def _options(
    roots: CheckpointRootsResource, categories: frozenset[Category] = frozenset(Category)
) -> ValidationOptions:
    return ValidationOptions(long_chain_threshold=roots.long_chain_threshold, categories=categories)


def _findings_markdown(findings: Iterable[Finding]) -> str:
    findings = list(findings)
    if not findings:
        return "No findings."
    rows = [(f.severity.value, f"`{f.code}`", f"`{f.path}`", f.message) for f in findings[:_MAX_ROWS]]
    if len(findings) > _MAX_ROWS:
        rows.append(("", "", "", f"... and {len(findings) - _MAX_ROWS} more"))
    return markdown.table(("severity", "code", "path", "message"), rows)


def _check(name: str, asset: str, findings: list[Finding]) -> dg.AssetCheckResult:
    """Errors fail the check at ERROR severity (blocking what follows); warnings fail it at WARN."""
    errors = [f for f in findings if f.severity == Severity.ERROR]
    warnings = [f for f in findings if f.severity == Severity.WARNING]
    return dg.AssetCheckResult(
        check_name=name,
        asset_key=asset,
        passed=not errors and not warnings,
        severity=dg.AssetCheckSeverity.ERROR if errors else dg.AssetCheckSeverity.WARN,
        metadata={
            "errors": len(errors),
            "warnings": len(warnings),
            "codes": ", ".join(sorted({f.code for f in findings})) or "none",
            "findings": dg.MetadataValue.md(_findings_markdown(findings)),
        },
    )


def _spec(name: str, asset: str, description: str) -> dg.AssetCheckSpec:
    # Partitioned as its asset: the catalog shows each checkpoint's result, and an alert can fire
    # on one checkpoint's, also when a run of many recorded it (`partition_checks`).
    return dg.AssetCheckSpec(
        name, asset=asset, blocking=True, description=description, partitions_def=checkpoint_partitions
    )


# Each audit check: its asset and the findings it judges.
_CHECKS = (
    (COMMIT_LOG_CHECK, "checkpoint_inventory", Category.COMMIT_LOG),
    (LINEAGE_CHECK, "checkpoint_lineage_report", Category.LINEAGE),
    (SNAPSHOT_CHECK, "checkpoint_lineage_report", Category.SNAPSHOT),
)


def partition_checks(
    key: str, validation: Validation | None, asset: str | None = None
) -> list[dg.AssetCheckEvaluation]:
    """One checkpoint's results of the audit checks (of `asset`'s only, when named), for its
    partition: what a run of many checkpoints records for each. `validation` None: the checkpoint
    could not be read, and every check fails for it."""
    out = []
    for name, of, category in _CHECKS:
        if asset is not None and of != asset:
            continue
        if validation is None:
            result = dg.AssetCheckResult(check_name=name, asset_key=of, passed=False,
                                         metadata={"errors": 1, "codes": "unreadable"})  # fmt: skip
        else:
            result = _check(name, of, list(validation.of(category)))
        out.append(dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey(of), check_name=name, passed=result.passed, metadata=result.metadata,
            severity=result.severity, blocking=True, partition=key,
        ))  # fmt: skip
    return out


def _results(
    context: dg.AssetExecutionContext,
    metadata: dict[str, Any],
    validations: dict[str, Validation],
    asset: str,
) -> Iterator[dg.MaterializeResult | dg.Output | dg.AssetCheckEvaluation]:
    """The materialization and the results of `asset`'s checks. A run of one partition returns its
    results with the materialization. A range run (a backfill's lone key too: it has no partition
    key) yields one per checkpoint, for its partition, and none for the range: Dagster records a
    result returned for a range under no partition, where no checkpoint's view of the check shows
    it. Results yielded as evaluations fail the step as a returned one does (a blocking check at
    ERROR), so a damaged checkpoint still stops its range's changes; the step's output of each
    selected check is still due."""
    if context.has_partition_key:
        (validation,) = validations.values()
        checks = [
            _check(name, of, list(validation.of(category))) for name, of, category in _CHECKS if of == asset
        ]
        yield dg.MaterializeResult(metadata=metadata, check_results=checks)
        return
    yield dg.MaterializeResult(metadata=metadata)
    selected = context.selected_asset_check_keys
    for name, of, _ in _CHECKS:
        check = dg.AssetCheckKey(dg.AssetKey(of), name)
        if of == asset and check in selected:
            yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check))
    for key, validation in validations.items():
        yield from (e for e in partition_checks(key, validation, asset) if e.asset_check_key in selected)


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    kinds={"spark"},
    backfill_policy=BATCHED,
    check_specs=[
        _spec(COMMIT_LOG_CHECK, "checkpoint_inventory", "Commit and offset logs agree and parse"),
    ],
)
def checkpoint_inventory(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource
) -> Iterator[dg.MaterializeResult | dg.Output | dg.AssetCheckEvaluation]:
    """Latest planned and committed batch, time of the last commit, and the files and bytes by kind
    that recovery at the latest committed batch reads (the checkpoint's totals come from cleanup
    planning, the one step that lists everything)."""
    only = frozenset({Category.COMMIT_LOG})

    def read(key: str) -> tuple[Checkpoint, dict, Validation]:
        ckpt = roots.load(key)
        return ckpt, inventory(ckpt), validate(ckpt, _options(roots, only))

    done = each_checkpoint(context.partition_keys, read)
    if len(done) > 1:
        rows = {key: (s["latest_committed_batch"], s["last_commit_time"] or "never", s["file_count"],
                      human_bytes(s["bytes"])) for key, (_, s, _) in done.items()}  # fmt: skip
        metadata: dict[str, Any] = {
            "checkpoints": len(done),
            "files": sum(s["file_count"] for _, s, _ in done.values()),
            "bytes": sum(s["bytes"] for _, s, _ in done.values()),
            "checkpoints_table": range_table(("batch", "last commit", "files", "size"), rows),
        }
    else:
        ((ckpt, summary, _),) = done.values()
        table = markdown.table(
            ("kind", "files", "bytes"),
            [(kind, v["count"], human_bytes(v["bytes"])) for kind, v in summary["files"].items()],
        )
        metadata = {
            "path": dg.MetadataValue.path(ckpt.url),
            "format_version": ckpt.format_version,
            "latest_committed_batch": summary["latest_committed_batch"],
            "latest_planned_batch": summary["latest_planned_batch"],
            "last_commit_time": summary["last_commit_time"] or "never",
            "files": summary["file_count"],
            "bytes": summary["bytes"],
            "size": human_bytes(summary["bytes"]),
            "files_by_kind": dg.MetadataValue.md(table),
        }
    yield from _results(context, metadata, {k: v for k, (_, _, v) in done.items()}, "checkpoint_inventory")


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    deps=[checkpoint_inventory],
    kinds={"pandas"},
    backfill_policy=BATCHED,
    check_specs=[
        _spec(LINEAGE_CHECK, "checkpoint_lineage_report", "Every store's replay chain is complete"),
        _spec(
            SNAPSHOT_CHECK,
            "checkpoint_lineage_report",
            "Snapshots in the lineages open and list existing SSTs",
        ),
    ],
)
def checkpoint_lineage_report(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource
) -> Iterator[dg.MaterializeResult | dg.Output | dg.AssetCheckEvaluation]:
    """Per store at the latest committed batch: the replay chain recovery would load and its cost."""
    only = frozenset({Category.LINEAGE, Category.SNAPSHOT})

    def read(key: str) -> tuple[Checkpoint, Validation]:
        ckpt = roots.load(key)
        return ckpt, validate(ckpt, _options(roots, only))

    done = each_checkpoint(context.partition_keys, read)
    validations = {key: v for key, (_, v) in done.items()}
    reports = {key: pd.DataFrame([e.as_dict() for e in v.lineage]) for key, v in validations.items()}
    if len(done) > 1:
        rows = {
            key: (
                ckpt.latest_committed_batch,
                len(r),
                _most(r, "chain_length"),
                human_bytes(_sum(r, "replay_bytes")),
            )
            for (key, (ckpt, _)), r in zip(done.items(), reports.values(), strict=True)
        }
        metadata: dict[str, Any] = {
            "checkpoints": len(done),
            "stores": sum(len(r) for r in reports.values()),
            "max_chain_length": max(_most(r, "chain_length") for r in reports.values()),
            "checkpoints_table": range_table(("batch", "stores", "longest chain", "replay"), rows),
        }
    else:
        ((ckpt, _),) = done.values()
        (report,) = reports.values()
        worst = (
            report.sort_values(["chain_length", "replay_bytes"], ascending=False).head(10)
            if len(report)
            else report
        )
        metadata = {
            "path": dg.MetadataValue.path(ckpt.url),
            "batch": ckpt.latest_committed_batch,
            "stores": len(report),
            "max_chain_length": _most(report, "chain_length"),
            "replay_bytes": _sum(report, "replay_bytes"),
            "max_lineage_header_bytes": _most(report, "lineage_header_bytes"),
            "worst_chains": dg.MetadataValue.md(
                worst.to_markdown(index=False) if len(worst) else "No stores."
            ),
        }
    yield from _results(context, metadata, validations, "checkpoint_lineage_report")


def _most(report: pd.DataFrame, column: str) -> int:
    return int(report[column].max()) if len(report) else 0


def _sum(report: pd.DataFrame, column: str) -> int:
    return int(report[column].sum()) if len(report) else 0
