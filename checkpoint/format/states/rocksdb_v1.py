"""RocksDB, checkpoint format V1: `<v>.zip` and `<v>.changelog`, found by listing the store's folder."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.format.providers import ROCKSDB_FILES, Provider
from checkpoint.format.states.base import Action, StateFormat

_REFUSED = {
    Action.PROVIDER_SNAPSHOT: "not an HDFS-backed store in format V1 (rocksdb V1)",
    Action.COMPACT_LIVE: "format V1 names carry no attempt id",
}


@dataclass(frozen=True)
class RocksDBFormatV1(StateFormat):
    """The base's answers (listed, RocksDB, no sidecars, any writer), less the provider's snapshot
    and compaction beside a running query: its next snapshot's name is the one the query writes."""

    def refusal(self, action: Action) -> str | None:
        return _REFUSED.get(action)


ROCKSDB_V1 = RocksDBFormatV1(Provider.ROCKSDB, 1, ROCKSDB_FILES)
