"""The `migrate_checkpoint` job: a checkpoint in Spark's default formats carried to RocksDB format
V2 with its state, launched from the UI.

The op only translates: configuration in, the migration's door
(`checkpoint.migrate.migrate_checkpoint`: the overlap refused, both maintenance leases; Spark's
ports from `jobs.migrate.spark_ports`), figures out as metadata. As for a fork, the destination must
lie under a configured root, and becomes a partition at once.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg
from pydantic import Field

from assets.partitions import CHECKPOINTS
from assets.resources import CheckpointRootsResource, SparkResource, quiet_period_field
from checkpoint.errors import CheckpointError


class MigrateConfig(dg.Config):
    source_partition: str = Field(
        description="The checkpoint to migrate (the HDFS-backed store or RocksDB format V1): its partition "
        "key, e.g. prod:team-a/orders"
    )
    destination: str = Field(description="An empty folder or URL under a configured root")
    batch: int | None = Field(default=None, description="A committed batch; default: the latest committed")
    quiet_period: str | None = quiet_period_field()


@dg.op(name="migrate", tags={"kind": "spark"})
def migrate_op(
    context: dg.OpExecutionContext,
    config: MigrateConfig,
    roots: CheckpointRootsResource,
    spark: SparkResource,
):
    """Every store's state written as RocksDB V2 snapshots, the logs forked with the batch's offset
    pinning RocksDB and its commit naming the new stores, proven by Spark's reader on both sides."""
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from jobs.migrate import spark_ports  # Spark only when this op runs

    try:
        request, dest_key = roots.two_sided(
            context, config.source_partition, config.destination, keeps_records=True
        )
        options = MigrationOptions(spark_ports(spark.session), batch=config.batch,
                                   quiet_seconds=roots.quiet_seconds_at_least(config.quiet_period),
                                   what="migrate_checkpoint")  # fmt: skip
        result = migrate_checkpoint(request, options)
    except CheckpointError as exc:
        raise dg.Failure(description=f"{config.source_partition} -> {config.destination}: {exc}") from exc
    context.instance.add_dynamic_partitions(CHECKPOINTS, [dest_key])
    doc = result.as_dict()
    return dg.Output(
        doc,
        metadata={
            "source": request.src.url,
            "destination": request.dest.url,
            "batch": result.batch,
            "source_state": result.source_state,
            "stores": len(result.stores),
            "keys": doc["keys"],
            "seconds": result.seconds,
            "state_seconds": result.state_seconds,
            "proof_seconds": result.proof_seconds,
            "partition": dest_key,
            "proven": dg.MetadataValue.md(
                "\n".join(
                    f"- operator {p['operator']} store {p['store']}: {p['rows']:,} rows, the same in both"
                    for p in result.proven
                )  # fmt: skip
            ),
        },
    )
