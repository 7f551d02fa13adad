"""The `fork_checkpoint` job: a checkpoint forked at a committed batch, launched from the UI.

The op only translates: configuration in, the fork's door (`checkpoint.fork.fork_checkpoint`: the
overlap refused, both maintenance leases), figures out as metadata. The destination must lie under
a configured root, and becomes a partition at once, so the audit and maintenance jobs see the fork
without waiting for the discovery sensor.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg
from pydantic import Field

from assets.partitions import CHECKPOINTS
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import human_bytes
from checkpoint.errors import CheckpointError
from checkpoint.fork import ForkOptions, fork_checkpoint


class ForkConfig(dg.Config):
    source_partition: str = Field(
        description="The checkpoint to fork: its partition key, e.g. prod:team-a/orders"
    )
    destination: str = Field(
        description="An empty folder or URL under a configured root (its storage options and credentials)"
    )
    batch: int | None = Field(default=None, description="A committed batch; default: the latest committed")
    new_query_id: bool = Field(
        default=False,
        description="Give the fork a query id of its own (sinks that remember batches: docs/fork.md)",
    )


@dg.op(name="fork")
def fork_op(context: dg.OpExecutionContext, config: ForkConfig, roots: CheckpointRootsResource):
    """Copies what recovery at the batch reads into the destination, and nothing else."""
    try:
        # Only where the deployment allows: a run cannot send production state to a place, or
        # with credentials, of its own choosing.
        request, dest_key = roots.two_sided(context, config.source_partition, config.destination)
        options = ForkOptions(batch=config.batch, new_query_id=config.new_query_id, what="fork_checkpoint")
        result = fork_checkpoint(request, options)
    except CheckpointError as exc:
        raise dg.Failure(description=f"{config.source_partition} -> {config.destination}: {exc}") from exc
    context.instance.add_dynamic_partitions(CHECKPOINTS, [dest_key])
    summary = (
        f"{'Already complete: ' if result.already_complete else ''}{result.files} files, "
        f"{human_bytes(result.total_bytes)}: what recovery at batch {result.batch} reads."
    )
    return dg.Output(
        result.as_dict(),
        metadata={
            "source": request.src.url,
            "destination": request.dest.url,
            "batch": result.batch,
            "query_id": result.query_id,
            "files": result.files,
            "bytes": result.total_bytes,
            "copied_files": result.copied_files,
            "copied_bytes": result.copied_bytes,
            "server_side_files": result.server_side_files,
            "resumed_files": result.resumed_files,
            "seconds": result.seconds,
            "requests": result.requests,
            "partition": dest_key,
            "summary": dg.MetadataValue.md(summary),
        },
    )
