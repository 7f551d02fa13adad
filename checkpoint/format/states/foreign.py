"""Anything Spark does not write: a provider of someone else's, or a pair Spark never writes (the
HDFS-backed store refuses checkpoint ids). Its files are listed, never read or changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from checkpoint.errors import Refused
from checkpoint.format.providers import ROCKSDB_FILES, Provider
from checkpoint.format.states.base import Action, StateFormat

T = TypeVar("T")

# After "the state store provider <class> is not Spark's", per action.
_WHY = {
    Action.READ: ": its state files are neither read nor changed",
    Action.CLEANUP: ": its files are not ours to delete",
    Action.MIGRATE: "",
    Action.READINESS: "",
}


@dataclass(frozen=True)
class ForeignFormat(StateFormat):
    """Found as its version's names say (the logs are Spark's), and refused by every action."""

    pinned: str | None = None  # the provider class the offset file pins

    def by_recovery(self, *, listed: T, named: T) -> T:
        return named if self.version == 2 else listed

    def names_by(self, unique_id: str | None) -> bool:
        return (unique_id is not None) == (self.version == 2)

    def by_engine(self, *, hdfs: T, rocksdb: T) -> T:
        # Fail closed: nothing that depends on how the state is held runs on it.
        raise Refused(self._why(": its state files are neither read nor changed"), "")

    def refusal(self, action: Action) -> str | None:
        return self._why(_WHY.get(action, ": its state files are not changed"))

    def _why(self, then: str) -> str:
        return f"the state store provider {self.pinned} is not Spark's{then}"


# Provider, version and class are filled in by `state_format_of`.
FOREIGN = ForeignFormat(Provider.OTHER, 1, ROCKSDB_FILES)
