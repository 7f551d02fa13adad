"""RocksDB, checkpoint format V2: `<v>_<id>.zip` and `.changelog`, named by the commit log's ids."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from checkpoint.format.layout import FileKind
from checkpoint.format.providers import ROCKSDB_FILES, Provider
from checkpoint.format.states.base import Action, StateFormat
from checkpoint.format.states.kinds import NAMED, Recovery

T = TypeVar("T")

_REFUSED = {
    Action.PROVIDER_SNAPSHOT: "not an HDFS-backed store in format V1 (rocksdb V2)",
    Action.MIGRATE: "already RocksDB format V2: `ckpt fork` relocates it as it is",
}


@dataclass(frozen=True)
class RocksDBFormatV2(StateFormat):
    """Every state file name carries the id the commit log records; Spark writes a `.crc` beside
    each; a snapshot takes an id the query never writes, so compaction may publish beside a running
    query; and the Spark that wrote a zip matters (its metadata version)."""

    @property
    def recovery(self) -> Recovery:
        return NAMED

    def names_by(self, unique_id: str | None) -> bool:
        return unique_id is not None

    def sidecar_of(self, rel: str) -> str | None:
        return f"{rel}.crc"

    def fork_decode(self, kind: FileKind) -> FileKind | None:
        return None

    def writer(self, read: Callable[[], T]) -> T | None:
        return read()

    def refusal(self, action: Action) -> str | None:
        return _REFUSED.get(action)


ROCKSDB_V2 = RocksDBFormatV2(Provider.ROCKSDB, 2, ROCKSDB_FILES)
