"""Read-only assets, one partition per checkpoint: the inventory and the lineage report, with the
blocking checks that must pass before anything changes a checkpoint.

Both read head-first (checkpoint.model.head): the logs and what recovery at the latest committed batch
reads, never a listing of `state/`, so an audit costs the same on a checkpoint with a long history.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
from collections.abc import Iterable, Iterator

import dagster as dg
import pandas as pd

from assets import markdown
from assets.partitions import checkpoint_partitions
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import (
    Category,
    Finding,
    Severity,
    ValidationOptions,
    human_bytes,
    inventory,
    validate,
)
from checkpoint.errors import CheckpointError
from checkpoint.model import Checkpoint

GROUP = "checkpoint_audit"
# The fleet report is in this group but not partitioned: the per-checkpoint jobs leave it out.
FLEET_ASSET = "checkpoint_fleet_report"
PER_CHECKPOINT_AUDIT = dg.AssetSelection.groups(GROUP) - dg.AssetSelection.assets(FLEET_ASSET)
COMMIT_LOG_CHECK = "commit_log_consistency"
LINEAGE_CHECK = "lineage_completeness"
SNAPSHOT_CHECK = "snapshot_integrity"
_MAX_ROWS = 25  # a markdown table longer than this is not read at a glance


def _load(roots: CheckpointRootsResource, key: str) -> Checkpoint:
    try:
        return roots.load(key)
    except CheckpointError as exc:
        raise dg.Failure(description=f"checkpoint {key} cannot be read: {exc}") from exc


def _options(roots: CheckpointRootsResource) -> ValidationOptions:
    return ValidationOptions(long_chain_threshold=roots.long_chain_threshold)


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
    return dg.AssetCheckSpec(name, asset=asset, blocking=True, description=description)


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    kinds={"spark"},
    check_specs=[
        _spec(COMMIT_LOG_CHECK, "checkpoint_inventory", "Commit and offset logs agree and parse"),
    ],
)
def checkpoint_inventory(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Latest planned and committed batch, time of the last commit, and the files and bytes by kind
    that recovery at the latest committed batch reads (the checkpoint's totals come from cleanup
    planning, the one step that lists everything)."""
    ckpt = _load(roots, context.partition_key)
    summary = inventory(ckpt)
    validation = validate(ckpt, _options(roots), frozenset({Category.COMMIT_LOG}))
    table = markdown.table(
        ("kind", "files", "bytes"),
        [(kind, v["count"], human_bytes(v["bytes"])) for kind, v in summary["files"].items()],
    )
    yield dg.Output(
        summary,
        metadata={
            "path": dg.MetadataValue.path(ckpt.url),
            "format_version": ckpt.format_version,
            "latest_committed_batch": summary["latest_committed_batch"],
            "latest_planned_batch": summary["latest_planned_batch"],
            "last_commit_time": summary["last_commit_time"] or "never",
            "files": summary["file_count"],
            "bytes": summary["bytes"],
            "size": human_bytes(summary["bytes"]),
            "files_by_kind": dg.MetadataValue.md(table),
        },
    )
    yield _check(COMMIT_LOG_CHECK, "checkpoint_inventory", list(validation.findings))


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    deps=[checkpoint_inventory],
    kinds={"pandas"},
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
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Per store at the latest committed batch: the replay chain recovery would load and its cost."""
    ckpt = _load(roots, context.partition_key)
    validation = validate(ckpt, _options(roots), frozenset({Category.LINEAGE, Category.SNAPSHOT}))
    report = pd.DataFrame([e.as_dict() for e in validation.lineage])
    worst = (
        report.sort_values(["chain_length", "replay_bytes"], ascending=False).head(10)
        if len(report)
        else report
    )
    yield dg.Output(
        report,
        metadata={
            "path": dg.MetadataValue.path(ckpt.url),
            "batch": ckpt.latest_committed_batch,
            "stores": len(report),
            "max_chain_length": int(report["chain_length"].max()) if len(report) else 0,
            "replay_bytes": int(report["replay_bytes"].sum()) if len(report) else 0,
            "max_lineage_header_bytes": int(report["lineage_header_bytes"].max()) if len(report) else 0,
            "worst_chains": dg.MetadataValue.md(
                worst.to_markdown(index=False) if len(worst) else "No stores."
            ),
        },
    )
    yield _check(LINEAGE_CHECK, "checkpoint_lineage_report", validation.of(Category.LINEAGE))
    yield _check(SNAPSHOT_CHECK, "checkpoint_lineage_report", validation.of(Category.SNAPSHOT))
