"""One run that validates many checkpoints: what the commit sensor requests for every checkpoint
whose validation is due in a tick, instead of one run (one process) per checkpoint and commit.

Each checkpoint is read head-first at its latest committed batch and validated as the audit assets
do; each gets an observation of `checkpoint_lineage_report` for its partition (error and warning
codes, longest chain), so the asset's page shows it. One unreadable checkpoint holds back no other;
the run fails at the end, naming every checkpoint with error findings.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg
from pydantic import Field

from assets import markdown
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import Severity, ValidationOptions, validate
from checkpoint.errors import CheckpointError


class ValidateConfig(dg.Config):
    partitions: list[str] = Field(description="Partition keys of the checkpoints to validate")


@dg.op(tags={"kind": "validation"})
def validate_each(context: dg.OpExecutionContext, config: ValidateConfig, roots: CheckpointRootsResource):
    """Head-first validation of each checkpoint named in the config."""
    options = ValidationOptions(long_chain_threshold=roots.policy().long_chain)
    rows: list[tuple] = []
    failed: list[str] = []
    for key in config.partitions:
        try:
            ckpt = roots.load(key)
            found = validate(ckpt, options)
        except CheckpointError as exc:
            failed.append(f"{key}: {exc}")
            rows.append((key, "-", "unreadable", "-", "-"))
            continue
        errors = sorted({f.code for f in found.findings if f.severity == Severity.ERROR})
        warnings = sorted({f.code for f in found.findings if f.severity == Severity.WARNING})
        chain = max((e.chain_length for e in found.lineage), default=0)
        if errors:
            failed.append(f"{key}: {', '.join(errors)}")
        rows.append(
            (key, ckpt.latest_committed_batch, ",".join(errors) or "-", ",".join(warnings) or "-", chain)
        )
        context.log_event(
            dg.AssetObservation(
                asset_key="checkpoint_lineage_report",
                partition=key,
                metadata={"errors": ",".join(errors) or "none", "warnings": ",".join(warnings) or "none",
                          "max_chain_length": chain, "batch": ckpt.latest_committed_batch or -1},
            )
        )  # fmt: skip
    table = markdown.table(("checkpoint", "batch", "errors", "warnings", "longest chain"), rows)
    context.add_output_metadata({"checkpoints": len(config.partitions), "with_errors": len(failed),
                                 "findings": dg.MetadataValue.md(table)})  # fmt: skip
    if failed:
        raise dg.Failure(description=f"{len(failed)} checkpoint(s) with errors: " + "; ".join(failed[:10]))
