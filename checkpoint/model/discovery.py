"""Finding checkpoints under a root, at any depth, with shallow listings that stop at each checkpoint.

A folder is a checkpoint when it holds a query `metadata` file beside an `offsets/` or `commits/`
folder. The walk never descends into a checkpoint (so never into its `state/`): requests grow with
the folders above the checkpoints, not with their files. Folders are listed concurrently.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from checkpoint.errors import NotACheckpointError
from checkpoint.format.layout import AUDIT_FOLDER
from checkpoint.model.checkpoint import Checkpoint
from checkpoint.model.head import load_head
from checkpoint.policy import POLICY
from checkpoint.storage import Folder, Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FoundCheckpoint:
    rel: str  # the folder relative to the root ("" when the root is a checkpoint)
    url: str

    def load(self, root: Storage, *, strict: bool = True, **head: Any) -> Checkpoint:
        """Head-first: the logs and what recovery reads (see checkpoint.model.head)."""
        return load_head(root.child(self.rel), strict=strict, **head)


def is_checkpoint(listing: Folder, rel: str) -> bool:
    names = {f.rel for f in listing.files}
    logs = {f"{rel}/{d}" if rel else d for d in ("offsets", "commits")}
    return (f"{rel}/metadata" if rel else "metadata") in names and bool(logs & set(listing.folders))


def find_checkpoints(root: Storage, workers: int = POLICY.list_workers) -> list[FoundCheckpoint]:
    """Every checkpoint folder under the root, the root itself included, in path order.

    A root that does not exist or cannot be listed raises: an outage is not an empty fleet.
    """
    top = root.list_dir("")
    if not top.exists:
        raise NotACheckpointError("no such directory", root.url)
    found: list[str] = []
    level = [("", top)]
    with ThreadPoolExecutor(workers) as pool:
        while level:
            below: list[str] = []
            for rel, listing in level:
                if is_checkpoint(listing, rel):
                    found.append(rel)
                else:
                    # The audit trail holds this tool's own copies (a repartition's backup fork):
                    # records, never checkpoints to maintain.
                    below += [f for f in listing.folders if f.rsplit("/", 1)[-1] != AUDIT_FOLDER]
            level = list(zip(below, pool.map(root.list_dir, below), strict=True))
    log.info("%s: %d checkpoints found in %d requests", root.url, len(found), root.calls.total())
    return [FoundCheckpoint(r, f"{root.url}/{r}" if r else root.url) for r in sorted(found)]


def scan(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Storage, list[FoundCheckpoint]]:
    storage = Storage(url, storage_options)
    return storage, find_checkpoints(storage)
