"""What the model is made of below a checkpoint: a listed file and what its path is, a store's
identity, and a store's files by version and id."""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from typing import NamedTuple, cast

from checkpoint.format import Classified, FileKind, classify
from checkpoint.storage import FileInfo


class CheckpointFile(NamedTuple):
    """A listed file and what its path is. A named tuple: cleanup makes one per file of every
    partition, in C (`of_listing`), where a frozen dataclass sets each field through a call."""

    info: FileInfo
    what: Classified

    @property
    def rel(self) -> str:
        return self.info.rel

    @property
    def kind(self) -> FileKind:
        return self.what.kind

    @staticmethod
    def of_listing(infos: Sequence[FileInfo]) -> tuple[CheckpointFile, ...]:
        """Each listed file with what its path is, in the listing's order. `tuple.__new__` over
        zipped pairs: no Python frame per file but classify's own."""
        pairs = zip(infos, map(classify, map(_info_rel, infos), repeat({})), strict=True)
        return cast("tuple[CheckpointFile, ...]", tuple(map(tuple.__new__, repeat(CheckpointFile), pairs)))


_info_rel = operator.attrgetter("rel")


@dataclass(frozen=True)
class StoreId:
    operator: int
    partition: int
    store: str

    def __str__(self) -> str:
        return f"op {self.operator} / part {self.partition} / {self.store}"

    @property
    def label(self) -> str:
        """`<operator>/<partition>/<store>`: how reports and plans name a store."""
        return f"{self.operator}/{self.partition}/{self.store}"


_VERSIONED_KINDS = frozenset(
    {FileKind.CHANGELOG, FileKind.ZIP, FileKind.DELTA, FileKind.SNAPSHOT, FileKind.SPARK_CRC}
)


@dataclass(frozen=True)
class Store:
    """The state files of one store: changelogs and zips by (version, uuid), SSTs, sidecars."""

    id: StoreId
    files: tuple[CheckpointFile, ...]

    @cached_property
    def by_version(self) -> dict[int, dict[str | None, tuple[CheckpointFile, ...]]]:
        grouped: dict[int, dict[str | None, list[CheckpointFile]]] = defaultdict(lambda: defaultdict(list))
        for f in self.files:
            if f.kind in _VERSIONED_KINDS:
                grouped[f.what.version_id][f.what.unique_id].append(f)
        return {
            v: {u: tuple(fs) for u, fs in sorted(by_uid.items(), key=lambda x: x[0] or "")}
            for v, by_uid in sorted(grouped.items())
        }

    def file(self, kind: FileKind, version: int, unique_id: str | None) -> CheckpointFile | None:
        for f in self.by_version.get(version, {}).get(unique_id, ()):
            if f.kind == kind:
                return f
        return None

    @property
    def ssts(self) -> tuple[CheckpointFile, ...]:
        return tuple(f for f in self.files if f.kind == FileKind.SST)


def group_stores(files: Iterable[CheckpointFile]) -> dict[StoreId, Store]:
    store_files: dict[StoreId, list[CheckpointFile]] = defaultdict(list)
    for f in files:
        if f.what.operator is not None and f.what.partition is not None and f.what.store is not None:
            store_files[StoreId(f.what.operator, f.what.partition, f.what.store)].append(f)
    return {
        sid: Store(sid, tuple(fs))
        for sid, fs in sorted(store_files.items(), key=lambda x: (x[0].operator, x[0].partition, x[0].store))
    }
