"""One run that validates many checkpoints: what discovery, the audit schedule and the commit
sensor request, instead of one run (one process) per checkpoint and commit.

Each checkpoint is read head-first at its latest committed batch and validated as the audit assets
do; each gets a materialization of `checkpoint_inventory` and `checkpoint_lineage_report` for its
partition (error and warning codes, longest chain), so the partitions page counts it as audited,
and its result of each audit check, so the catalog shows the checks passing or failing per
checkpoint and an alert can fire on one.
One unreadable checkpoint holds back no other; the run fails at the end, naming every checkpoint
with error findings in a table and a CSV.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from pydantic import Field

from assets import markdown
from assets.checkpoints import checkpoint_inventory, checkpoint_lineage_report, partition_checks
from assets.partitions import CHECKPOINTS
from assets.reports import write_csv
from assets.resources import CheckpointRootsResource, StepContext
from checkpoint.analysis import Severity, ValidationOptions, validate
from checkpoint.errors import CheckpointError
from orchestration.queue import BULK_TAG, Kind, run_tags

# Rows of a run's table in the UI; every row is in its CSV. A batched run names at most 500
# checkpoints, so its `failed` table lists each one that failed.
_SHOWN = 500
_PROGRESS_SECONDS = 10.0  # between a long run's progress lines
_clock = time.monotonic  # a test moves it by hand


@dataclass
class Outcomes:
    """What a batched run did to each checkpoint: one row each, and why each that failed did."""

    columns: tuple[str, ...]
    rows: dict[str, list] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def fail(self, key: str, why: str) -> None:
        # The first failure of a checkpoint is its cause; later steps skip it.
        self.failed.setdefault(key, why)

    def report(self, context: StepContext, roots: CheckpointRootsResource, what: str) -> dict:
        """The run's metadata: every checkpoint's row (the first `_SHOWN` in the UI, all of them in
        `<what>/<run id>.csv` in the audit root), then a Failure naming every failed checkpoint."""
        header = (*self.columns, "failed")
        rows = [(key, *cells, self.failed.get(key, "")) for key, cells in self.rows.items()]
        csv: dg.MetadataValue
        try:
            written = write_csv(roots, f"{what}/{context.run.run_id}.csv", ("checkpoint", *header), rows)
            csv, where = dg.MetadataValue.path(written), f"in {written}"
        except CheckpointError as exc:  # the tables below still name every failed checkpoint
            context.log.warning(f"the run's CSV was not written: {exc}")
            csv, where = dg.MetadataValue.text(f"not written: {exc}"), "(its CSV was not written)"
        failures = markdown.table(("checkpoint", "why"), self.failed.items()) if self.failed else "none"
        metadata: dict[str, Any] = {
            "checkpoints": len(self.rows),
            "failed_checkpoints": len(self.failed),
            "checkpoints_table": dg.MetadataValue.md(markdown.table(("checkpoint", *header), rows[:_SHOWN])),
            "failed": dg.MetadataValue.md(failures),
            "csv": csv,
        }
        if self.failed:
            first = "; ".join(f"{key}: {why}" for key, why in list(self.failed.items())[:3])
            raise dg.Failure(
                description=f"{len(self.failed)} of {len(self.rows)} checkpoint(s) failed ({first}"
                f"{'; ...' if len(self.failed) > 3 else ''}); every one is in this failure's `failed` table "
                f"and {where}",
                metadata=metadata,
            )
        return metadata


def validate_keys(context: StepContext, roots: CheckpointRootsResource, keys: Sequence[str]) -> Outcomes:
    """Head-first validation of each checkpoint, materializing its audit partitions."""
    options = ValidationOptions(long_chain_threshold=roots.policy().long_chain)
    done = Outcomes(("batch", "errors", "warnings", "longest chain"))
    context.log.info(f"validating {len(keys)} checkpoint(s) head-first")
    # A config names any string (`t:a/` is `t:a` read again): checks are recorded for partitions.
    partitions = set(context.instance.get_dynamic_partitions(CHECKPOINTS))
    last = _clock()
    for at, key in enumerate(keys):
        if _clock() - last >= _PROGRESS_SECONDS:  # a run of 500 takes minutes: say where it is
            last = _clock()
            context.log.info(f"validated {at} of {len(keys)} checkpoint(s), {len(done.failed)} failed so far")
        try:
            ckpt = roots.load(key)
            found = validate(ckpt, options)
        except (CheckpointError, ValueError) as exc:  # a run's config names any string
            done.rows[key] = ["-", "unreadable", "-", "-"]
            done.fail(key, str(exc))
            if key in partitions:
                for evaluation in partition_checks(key, None):
                    context.log_event(evaluation)  # type: ignore[arg-type]  # typed narrower than it takes
            continue
        errors = ",".join(sorted({f.code for f in found.findings if f.severity == Severity.ERROR}))
        warnings = ",".join(sorted({f.code for f in found.findings if f.severity == Severity.WARNING}))
        chain = max((e.chain_length for e in found.lineage), default=0)
        batch = ckpt.latest_committed_batch
        done.rows[key] = [batch, errors or "-", warnings or "-", chain]
        if errors:
            done.fail(key, errors)
        context.log_event(
            dg.AssetMaterialization(
                asset_key=checkpoint_inventory.key, partition=key,
                metadata={"path": dg.MetadataValue.path(ckpt.url), "latest_committed_batch": batch,
                          "format_version": ckpt.format_version, "audited_by": "validate_checkpoints"},
            )
        )  # fmt: skip
        context.log_event(
            dg.AssetMaterialization(
                asset_key=checkpoint_lineage_report.key, partition=key,
                metadata={"errors": errors or "none", "warnings": warnings or "none",
                          "max_chain_length": chain, "batch": -1 if batch is None else batch},
            )
        )  # fmt: skip
        for evaluation in partition_checks(key, found) if key in partitions else ():  # the catalog's
            context.log_event(evaluation)  # type: ignore[arg-type]  # typed narrower than it takes
    context.log.info(f"validated {len(keys)} of {len(keys)} checkpoint(s), {len(done.failed)} failed")
    return done


class ValidateConfig(dg.Config):
    partitions: list[str] = Field(description="Partition keys of the checkpoints to validate")


@dg.op(tags={"kind": "validation"})
def validate_each(context: dg.OpExecutionContext, config: ValidateConfig, roots: CheckpointRootsResource):
    """Head-first validation of each checkpoint named in the config."""
    done = validate_keys(context, roots, config.partitions)
    context.add_output_metadata(done.report(context, roots, "validation"))


JOB = "validate_checkpoints"
BULK_MAX_RUNTIME_SECONDS = 2 * 3600


def validation_request(keys: Sequence[str], why: str, *, bulk: bool = False) -> dg.RunRequest:
    """One run that validates `keys`; its run key names them, so a repeated tick asks for it once.
    `bulk`: an audit of the whole fleet (discovery's, the schedule's), which runs one at a time
    (`queue.BULK_TAG`); the commit sensor's runs, of checkpoints that just wrote, do not wait for it."""
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
    config = {"ops": {"validate_each": {"config": {"partitions": list(keys)}}}}
    tags = {**run_tags(Kind.VALIDATION), "ckpt/checkpoints": str(len(keys))}
    if bulk:
        # One at a time: a run stuck on a hung mount would hold every later audit behind it until
        # the deployment's 6 h limit. 500 checkpoints take minutes.
        tags.update({BULK_TAG: "true", "dagster/max_runtime": str(BULK_MAX_RUNTIME_SECONDS)})
    return dg.RunRequest(job_name=JOB, run_config=config, run_key=f"{why}:{digest}", tags=tags)
