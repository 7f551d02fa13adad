"""A whole checkpoint counted, a page of its listing at a time (`ckpt inspect`): its files and
bytes by kind, and a model of it that says what a model of every file would say of its operators
and format, in the memory of its logs and one file per store and kind, never of its history."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from checkpoint.format import FileKind
from checkpoint.model.checkpoint import Checkpoint, CheckpointFile, build_checkpoint, untrusted_files
from checkpoint.storage import FileInfo, Storage

# The kinds the model parses: every one of them is kept. A commit or an offset log holds what
# Spark retains of it (100 batches by default), not the query's history.
_PARSED = frozenset({FileKind.QUERY_METADATA, FileKind.OFFSET, FileKind.COMMIT, FileKind.OPERATOR_METADATA})


@dataclass(frozen=True)
class Census:
    """Files and bytes by kind (`FileKind.value`), in `FileKind`'s order, only kinds present."""

    count: dict[str, int]
    size: dict[str, int]

    @property
    def files(self) -> int:
        return sum(self.count.values())

    @property
    def bytes(self) -> int:
        return sum(self.size.values())


def load_census(
    where: str | Storage, storage_options: dict[str, Any] | None = None
) -> tuple[Checkpoint, Census]:
    """The checkpoint's model and what every file comes to, loaded strictly (as
    `load_checkpoint`, whose first refusal it raises): a listed file no read may open refuses it,
    the first in order of path.

    The model holds the logs and, of the state files, the first of each (kind, operator,
    partition, store, whether named with an id): all that the operators (their stores and
    partitions, without operator metadata) and the format version are told from. Its `files`
    are not the checkpoint's: its counts and bytes are the census's."""
    storage = where if isinstance(where, Storage) else Storage(where, storage_options)
    count: Counter[FileKind] = Counter()
    size: Counter[FileKind] = Counter()
    kept: list[FileInfo] = []
    firsts: dict[tuple[Any, ...], FileInfo] = {}
    for page in storage.pages():
        untrusted = untrusted_files(storage, page)
        if untrusted:
            raise untrusted[min(untrusted)]
        for f in CheckpointFile.of_listing(page):
            count[f.kind] += 1
            size[f.kind] += f.info.size
            if f.kind in _PARSED:
                kept.append(f.info)
            else:
                w = f.what
                firsts.setdefault((f.kind, w.operator, w.partition, w.store, bool(w.unique_id)), f.info)
    listed = sorted([*kept, *firsts.values()], key=lambda i: i.rel)
    ckpt = build_checkpoint(storage, CheckpointFile.of_listing(listed), strict=True)
    census = Census(
        {k.value: count[k] for k in FileKind if count[k]}, {k.value: size[k] for k in FileKind if count[k]}
    )
    return ckpt, census
