"""Spark's default: the HDFS-backed state store, format V1 (`<v>.delta` and `<v>.snapshot`)."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.format.providers import HDFS_FILES, Provider
from checkpoint.format.states.base import Action, StateFormat
from checkpoint.format.states.kinds import UNSAFE_ROW_MAPS, Engine

_REFUSED = {
    Action.REBUILD: "not a RocksDB store (hdfs V1)",
    Action.REPARTITION: "the HDFS-backed state store: Spark's repartitioner reads RocksDB state only "
    "(it refuses this one: UNSUPPORTED_PROVIDER)",
    Action.COMPACT_LIVE: "format V1 names carry no attempt id",
    Action.PURGE: "the HDFS-backed state store keeps no TTL state (transformWithState needs RocksDB)",
}


@dataclass(frozen=True)
class HdfsFormat(StateFormat):
    """Listed from the store's folder; UnsafeRow maps (so a migration re-lays a prefix-scanned
    store's keys: RocksDB's prefix encoder puts the prefix columns first, this store keeps the key
    row whole); snapshots written by Spark's provider; no TTL state, no repartition."""

    @property
    def engine(self) -> Engine:
        return UNSAFE_ROW_MAPS

    def refusal(self, action: Action) -> str | None:
        return _REFUSED.get(action)


HDFS = HdfsFormat(Provider.HDFS, 1, HDFS_FILES)
