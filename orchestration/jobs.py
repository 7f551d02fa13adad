"""Every Dagster job of the code location, in one place; their names are what users' instances hold
(runs, schedules, sensors and run keys refer to them), so a name here never changes."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg

from assets.checkpoints import FLEET_ASSET, PER_CHECKPOINT_AUDIT
from assets.cleanup import APPLY_TAG
from assets.cleanup import GROUP as CLEANUP_GROUP
from assets.compaction import GROUP as COMPACTION_GROUP
from assets.names import CLEANUP_JOB, COMPACTION_JOB, MAINTENANCE_JOB
from orchestration.expiry import purge_expired_op
from orchestration.fork import fork_op
from orchestration.maintenance import JOB as MAINTAIN_JOB
from orchestration.maintenance import maintain_each
from orchestration.migrate import migrate_op
from orchestration.queue import Kind, run_tags
from orchestration.repartition import repartition_op
from orchestration.retire import retire_op
from orchestration.validation import JOB as VALIDATE_JOB
from orchestration.validation import validate_each

audit_job = dg.define_asset_job(
    "checkpoint_audit",
    selection=PER_CHECKPOINT_AUDIT,
    description="Read-only: inventory, lineage and validation of the selected checkpoints. Changes nothing.",
    tags=run_tags(Kind.AUDIT),
)

compaction_job = dg.define_asset_job(
    COMPACTION_JOB,
    selection=PER_CHECKPOINT_AUDIT | dg.AssetSelection.groups(COMPACTION_GROUP),
    description="Audit, then rebuild snapshots for stores with long replay chains (writes new files only).",
    tags=run_tags(Kind.COMPACTION),
)

cleanup_job = dg.define_asset_job(
    CLEANUP_JOB,
    selection=PER_CHECKPOINT_AUDIT | dg.AssetSelection.groups(CLEANUP_GROUP),
    description="Audit, plan and (when asked) delete orphaned state files of the selected checkpoints.",
    tags=run_tags(Kind.CLEANUP),
)

maintenance_job = dg.define_asset_job(
    MAINTENANCE_JOB,
    selection=PER_CHECKPOINT_AUDIT | dg.AssetSelection.groups(COMPACTION_GROUP, CLEANUP_GROUP),
    description=(
        "Audit (blocking checks), compact long replay chains, plan orphan cleanup; deletes only with "
        f"the tag {APPLY_TAG}=true or the cleanup asset's `apply` config."
    ),
    tags=run_tags(Kind.MAINTENANCE),
)

fleet_job = dg.define_asset_job(
    "checkpoint_fleet",
    selection=dg.AssetSelection.assets(FLEET_ASSET),
    description="Read-only: the fleet report over every checkpoint partition. Changes nothing.",
    tags=run_tags(Kind.REPORT),
)


@dg.job(
    name="fork_checkpoint",
    description="Fork a checkpoint at a committed batch into an empty destination: relocate, roll back, "
    "or audit a copy (launch from the Launchpad with the op's config)",
    tags=run_tags(Kind.FORK),
)
def fork_job():
    fork_op()


@dg.job(
    name=MAINTAIN_JOB,
    description="Validate, compact and clean the checkpoints named in the config, in one run and one Spark "
    "application (the maintenance schedules' runs; the commit sensor's compactions, with cleanup off)",
    tags=run_tags(Kind.MAINTENANCE),
)
def maintain_checkpoints_job():
    maintain_each()


@dg.job(
    name=VALIDATE_JOB,
    description="Read-only: head-first validation of the checkpoints named in the config (the commit "
    "sensor's batched validation run). Changes nothing.",
    tags=run_tags(Kind.VALIDATION),
)
def validate_checkpoints_job():
    validate_each()


@dg.job(
    name="repartition_checkpoint",
    description="Change a stopped query's state partition count with Spark's repartitioner: preflight, "
    "backup fork, rewrite, verification, undo on failure (launch from the Launchpad; `undo` takes the newest "
    "repartition back)",
    tags=run_tags(Kind.REPARTITION),
)
def repartition_job():
    repartition_op()


@dg.job(
    name="migrate_checkpoint",
    description="Carry a stopped checkpoint in Spark's default formats (the HDFS-backed store, RocksDB "
    "format V1) to RocksDB format V2 with its state, in an empty destination (launch from the Launchpad)",
    tags=run_tags(Kind.MIGRATE),
)
def migrate_job():
    migrate_op()


@dg.job(
    name="retire_checkpoints",
    description="Retire dormant checkpoints, launched by a person, never a schedule: one launch plans "
    "(`plan`: partitions), a later one applies plans after the grace period (`apply`: partition and plan "
    "id), archiving each and then deleting it; the launcher is recorded as the approval",
    tags=run_tags(Kind.RETIRE),
)
def retire_job():
    retire_op()


@dg.job(
    name="purge_expired_state",
    description="Take what a TTL expired out of a stopped transformWithState query's latest snapshot, as its "
    "next batch would (launch from the Launchpad with a partition; see the checkpoint_expired_state asset)",
    tags=run_tags(Kind.PURGE),
)
def purge_expired_job():
    purge_expired_op()


ALL_JOBS = (audit_job, cleanup_job, compaction_job, maintenance_job, fleet_job, fork_job,
            validate_checkpoints_job, repartition_job, migrate_job, maintain_checkpoints_job,
            retire_job, purge_expired_job)  # fmt: skip
