"""The `repartition_checkpoint` job: a stopped query's state partition count changed from the
Launchpad, with the same guards, proof and undo as `ckpt repartition` (`jobs/repartition.py`).

The op only translates: configuration in, the guarded flow under the checkpoint's lease, the figures
out as metadata. A refusal or a failed (and undone) repartition fails the run with the reason.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg
from pydantic import Field

from assets import markdown
from assets.resources import CheckpointRootsResource, SparkResource, quiet_period_field
from checkpoint.errors import CheckpointError


class RepartitionConfig(dg.Config):
    partition: str = Field(description="The checkpoint: its partition key, e.g. prod:team-a/orders")
    partitions: int | None = Field(default=None, description="The new state partition count")
    undo: bool = Field(
        default=False, description="Take back the newest repartition while its batch is the latest"
    )
    query_stopped: bool = Field(
        default=False,
        description="With undo: the query is stopped, so a repartition newer than the quiet period may go",
    )
    quiet_period: str | None = quiet_period_field()


@dg.op(name="repartition", tags={"kind": "spark"})
def repartition_op(
    context: dg.OpExecutionContext,
    config: RepartitionConfig,
    roots: CheckpointRootsResource,
    spark: SparkResource,
):
    """Preflight, backup fork, Spark's rewrite, verification (digests, placement, validation); undo on
    failure."""
    from checkpoint.repartition import (
        RepartitionOptions,
        UndoOptions,
        repartition_checkpoint,
        undo_repartition,
    )
    from jobs.repartition import spark_engine  # Spark when run

    request, what = roots.in_place(context, config.partition, keeps_records=True), "repartition_checkpoint"
    storage = request.storage
    try:
        if config.undo:
            quiet = roots.quiet_seconds_at_least(config.quiet_period)
            undone = undo_repartition(request, UndoOptions(quiet, config.query_stopped, what=what))
            return dg.Output(undone.as_dict(), metadata={"outcome": "undone", "deleted": undone.deleted})
        if config.partitions is None:
            raise dg.Failure(description="set `partitions` (the new count) or `undo`")
        quiet = roots.quiet_seconds_at_least(config.quiet_period)
        options = RepartitionOptions(config.partitions, spark_engine(spark.session), quiet, what=what)
        result = repartition_checkpoint(request, options)
    except CheckpointError as exc:
        raise dg.Failure(description=f"{config.partition}: {exc}") from exc
    rows = [(s.operator, s.store, s.rows, s.digest_after, s.misplaced) for s in result.stores]
    return dg.Output(
        result.as_dict(),
        metadata={
            "checkpoint": storage.url,
            "from_partitions": result.from_partitions,
            "to_partitions": result.to_partitions,
            "batch": result.batch,
            "backup": result.backup or "-",
            "seconds": dg.MetadataValue.json(result.seconds),
            "stores": dg.MetadataValue.md(
                markdown.table(("operator", "store", "rows", "digest", "misplaced"), rows)
            ),
        },
    )
