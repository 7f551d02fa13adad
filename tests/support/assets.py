"""What the Dagster asset tests share: a root of one checkpoint, its partition, a discovery tick
applied as the daemon applies it, and what a run materialized."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.partitions import partition_key
from assets.resources import CheckpointRoot, CheckpointRootsResource
from orchestration.sensors import checkpoint_discovery_sensor


def roots_over(path: Path, name: str = "corpus") -> CheckpointRootsResource:
    """The roots resource over one root, `path`, named `name`."""
    return CheckpointRootsResource(roots=[CheckpointRoot(name=name, url=str(path))])


def discovery_tick(instance, roots: CheckpointRootsResource, cursor: str | None = None):
    """A tick of the discovery sensor, its partition requests applied as the daemon applies them."""
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
    result = checkpoint_discovery_sensor(ctx)
    if isinstance(result, dg.SensorResult):
        for req in result.dynamic_partitions_requests or []:
            if isinstance(req, dg.AddDynamicPartitionsRequest):
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            else:
                for key in req.partition_keys:
                    instance.delete_dynamic_partition(req.partitions_def_name, key)
    return result


def stopped_root(instance, root: Path, **options) -> tuple[CheckpointRootsResource, str]:
    """The roots resource over `root`'s `orders` checkpoint, and its partition key, added."""
    # The corpus' queries are stopped, and this deployment says so (else the live rules apply).
    stopped = CheckpointRoot(name="t", url=str(root), queries_stopped=True)
    roots = CheckpointRootsResource(roots=[stopped], **options)
    key = partition_key("t", "orders")
    instance.add_dynamic_partitions("checkpoints", [key])
    return roots, key


def metadata_of(result, asset: str) -> dict:
    """The metadata of `asset`'s first materialization in `result`, as values."""
    mat = next(iter(result.asset_materializations_for_node(asset)))
    return {k: v.value for k, v in mat.metadata.items()}
