"""What a checkpoint is, as Spark's recovery sees it: the immutable model (`checkpoint`), its
head-first loading (`head`), each store's replay chain (`lineage`) and finding checkpoints under
a root (`discovery`)."""

from checkpoint.model.checkpoint import Checkpoint, CheckpointFile, StoreId, load_checkpoint
from checkpoint.model.discovery import FoundCheckpoint, find_checkpoints, scan
from checkpoint.model.head import latest_commit, load_head
from checkpoint.model.lineage import StoreLineage, checkpoint_lineage

__all__ = ["Checkpoint", "CheckpointFile", "FoundCheckpoint", "StoreId", "StoreLineage", "checkpoint_lineage",
           "find_checkpoints", "latest_commit", "load_checkpoint", "load_head", "scan"]  # fmt: skip
