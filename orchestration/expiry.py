"""The `purge_expired_state` job: a stopped transformWithState query's expired state taken out of its
latest snapshot, launched from the Launchpad per partition, with the guards of `ckpt purge-expired`
(`checkpoint.expiry`). The op only translates: configuration in, the purge under the checkpoint's
lease, the figures out as metadata. A refusal fails the run with the reason."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg
from pydantic import Field

from assets import markdown
from assets.resources import CheckpointRootsResource, SparkResource, quiet_period_field
from checkpoint.analysis import human_bytes
from checkpoint.errors import CheckpointError
from checkpoint.expiry import PurgeOptions, purge_expired


class PurgeConfig(dg.Config):
    partition: str = Field(description="The checkpoint: its partition key, e.g. prod:team-a/orders")
    as_of: float | None = Field(
        default=None,
        description="What expired at this time (seconds since the epoch; default now, never later)",
    )
    quiet_period: str | None = quiet_period_field()


@dg.op(name="purge_expired", tags={"kind": "spark"})
def purge_expired_op(
    context: dg.OpExecutionContext, config: PurgeConfig, roots: CheckpointRootsResource, spark: SparkResource
):
    """The preflight, then each transformWithState store rebuilt without what expired, checked and
    published under a free name: a Spark task a store, in this deployment's Spark."""
    from jobs.expiry import spark_purges  # Spark only when this op runs

    request = roots.in_place(context, config.partition, keeps_records=True)
    options = PurgeOptions(config.as_of, roots.quiet_seconds_at_least(config.quiet_period),
                           run=spark_purges(spark.session))  # fmt: skip
    try:
        done = purge_expired(request, options)
    except CheckpointError as exc:
        raise dg.Failure(description=f"{config.partition}: {exc}") from exc
    doc = done.as_dict()
    rows = [(s["operator"], s["partition"], s["store"], s["expired"], human_bytes(s["expired_bytes"]),
             s["outcome"]) for s in doc["stores"]]  # fmt: skip
    stores = markdown.table(("operator", "partition", "store", "expired", "bytes", "outcome"), rows)
    metadata = {"checkpoint": done.url, "batch": -1 if doc["batch"] is None else doc["batch"],
                "as_of_ms": doc["as_of_ms"], "expired": doc["expired"], "expired_bytes": doc["expired_bytes"],
                "purged": doc["purged"], "stores": dg.MetadataValue.md(stores)}  # fmt: skip
    return dg.Output(doc, metadata=metadata)
