"""What the Dagster asset tests share: a root of one checkpoint, its partition, and what a run
materialized."""

from __future__ import annotations

from pathlib import Path

from assets.partitions import partition_key
from assets.resources import CheckpointRoot, CheckpointRootsResource
from tests.support.files import files_of


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


def files_under(root: Path) -> set[str]:
    """The names of every file under `root`: `files_of`'s, without their sizes and times."""
    return set(files_of(root))
