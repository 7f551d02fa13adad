"""The two things about a state format that are behaviour, not data: how its recovery finds a
store's files (`Recovery`: `LISTED` or `NAMED`), and what holds its state (`Engine`:
`UNSAFE_ROW_MAPS` or `ROCKSDB_INSTANCES`).

Code whose work differs by one of them keeps both halves together in one object, `ByRecovery` or
`ByEngine`, made once beside that code and named for the work (`LINEAGE = ByRecovery(listed=...,
named=...)`), and asks the checkpoint's format for its half: `ckpt.states.recovery.of(LINEAGE)`.
No caller holds a flag to branch on. A kind that takes one of the existing halves (a foreign
format's `Unread`) is a new class here; a third way of recovery would be a third half in every
pair, which the type checker then asks of each."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, TypeVar

from checkpoint.errors import Refused

T = TypeVar("T")


@dataclass(frozen=True)
class ByRecovery(Generic[T]):
    """A piece of work, or a value, in the two ways recovery finds a store's files."""

    listed: T  # the store's folder listed: the newest snapshot at or below a version, the deltas above it
    named: T  # every file named from the commit log's ids and the changelog headers


@dataclass(frozen=True)
class ByEngine(Generic[T]):
    """A piece of work, or a value, for each of the two things that hold a store's state."""

    hdfs: T  # the HDFS-backed store's UnsafeRow maps: snapshots written by Spark's provider
    rocksdb: T  # RocksDB instances: zips of SSTs, changelogs in RocksDB's encoding


class Recovery(ABC):
    @abstractmethod
    def of(self, pair: ByRecovery[T]) -> T:
        """This recovery's half of `pair`."""


class _Listed(Recovery):
    def of(self, pair: ByRecovery[T]) -> T:
        return pair.listed

    def __reduce__(self) -> str:
        return "LISTED"  # unpickled (a Spark task's checkpoint) as the one LISTED


class _Named(Recovery):
    def of(self, pair: ByRecovery[T]) -> T:
        return pair.named

    def __reduce__(self) -> str:
        return "NAMED"


class Engine(ABC):
    @abstractmethod
    def of(self, pair: ByEngine[T]) -> T:
        """This engine's half of `pair`."""


class _UnsafeRowMaps(Engine):
    def of(self, pair: ByEngine[T]) -> T:
        return pair.hdfs

    def __reduce__(self) -> str:
        return "UNSAFE_ROW_MAPS"


class _RocksDBInstances(Engine):
    def of(self, pair: ByEngine[T]) -> T:
        return pair.rocksdb

    def __reduce__(self) -> str:
        return "ROCKSDB_INSTANCES"


@dataclass(frozen=True)
class Unread(Engine):
    """A state nobody here may read (a foreign provider's): every question about it is refused,
    `why` naming the provider, so nothing that depends on how the state is held runs on it."""

    why: str

    def of(self, pair: ByEngine[T]) -> T:
        raise Refused(self.why, "")


LISTED: Recovery = _Listed()
NAMED: Recovery = _Named()
UNSAFE_ROW_MAPS: Engine = _UnsafeRowMaps()
ROCKSDB_INSTANCES: Engine = _RocksDBInstances()
