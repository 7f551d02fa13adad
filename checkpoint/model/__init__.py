"""What a checkpoint is, as Spark's recovery sees it: the immutable model (`checkpoint`; what it
holds and how it was listed, `scopes`; its operators, `operators`), its head-first loading
(`head`), a whole checkpoint counted a page of its listing at a time (`census`), each store's
replay chain (`lineage`), finding checkpoints under a root (`discovery`) and a checkpoint's files
copied to local disk, checked (`transfer`)."""

from checkpoint.model.census import Census, load_census
from checkpoint.model.checkpoint import (
    Checkpoint,
    CheckpointFile,
    StoreId,
    build_checkpoint,
    load_checkpoint,
    state_partition_folders,
    untrusted_files,
)
from checkpoint.model.discovery import (
    FoundCheckpoint,
    each_checkpoint,
    find_checkpoints,
    is_checkpoint,
    scan,
    within_deadline,
)
from checkpoint.model.head import latest_commit, load_head, newest_commit, store_folder
from checkpoint.model.lineage import (
    StoreLineage,
    checkpoint_lineage,
    maintained_batches,
    partitions_named,
    state_partitions,
    store_ids,
)
from checkpoint.model.scopes import Listing, Logs, Scope, StateFolders
from checkpoint.model.transfer import (
    check_disk_left,
    check_free_disk,
    check_hadoop_checksum,
    download_checked,
)

__all__ = [
    "Census",
    "Checkpoint",
    "CheckpointFile",
    "FoundCheckpoint",
    "Listing",
    "Logs",
    "Scope",
    "StateFolders",
    "StoreId",
    "StoreLineage",
    "build_checkpoint",
    "check_disk_left",
    "check_free_disk",
    "check_hadoop_checksum",
    "checkpoint_lineage",
    "download_checked",
    "each_checkpoint",
    "find_checkpoints",
    "is_checkpoint",
    "latest_commit",
    "newest_commit",
    "load_census",
    "load_checkpoint",
    "load_head",
    "maintained_batches",
    "partitions_named",
    "scan",
    "state_partition_folders",
    "state_partitions",
    "untrusted_files",
    "within_deadline",
    "store_folder",
    "store_ids",
]
