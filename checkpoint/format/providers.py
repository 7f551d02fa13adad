"""The state store providers whose files this project reads, and which files each one's recovery
reads: RocksDB's zips and changelogs, the HDFS-backed store's snapshots and deltas."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from checkpoint.format.layout import FileKind
from checkpoint.format.spark import HDFS_PROVIDER, ROCKSDB_PROVIDER


class Provider(StrEnum):
    """The state store provider a checkpoint is pinned to: every offset file's conf names it
    (SPARK-21192), and a restart keeps it whatever the session says."""

    HDFS = "hdfs"  # HDFSBackedStateStoreProvider, Spark's default: <v>.delta and <v>.snapshot
    ROCKSDB = "rocksdb"  # RocksDBStateStoreProvider: <v>[_<id>].zip, .changelog and SSTs
    OTHER = "other"  # a provider of someone else's: its files are not ours to read

    @staticmethod
    def of_class(name: str | None) -> Provider:
        # An offset file without the key was written before Spark pinned it, under its default.
        if name is None or name.endswith(HDFS_PROVIDER.rsplit(".", 1)[1]):
            return Provider.HDFS
        if name.endswith(ROCKSDB_PROVIDER.rsplit(".", 1)[1]):
            return Provider.ROCKSDB
        return Provider.OTHER


class StateFiles(NamedTuple):
    """The two kinds of state file a provider's recovery reads: the one it starts from, and the
    one it replays on top."""

    base: FileKind
    step: FileKind

    @staticmethod
    def of(provider: Provider) -> StateFiles:
        return HDFS_FILES if provider == Provider.HDFS else ROCKSDB_FILES

    def name(self, kind: FileKind, version: int, unique_id: str | None = None) -> str:
        return f"{version}_{unique_id}.{kind.value}" if unique_id else f"{version}.{kind.value}"


HDFS_FILES = StateFiles(FileKind.SNAPSHOT, FileKind.DELTA)
ROCKSDB_FILES = StateFiles(FileKind.ZIP, FileKind.CHANGELOG)
