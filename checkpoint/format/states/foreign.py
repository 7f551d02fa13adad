"""Anything Spark does not write: a provider of someone else's, or a pair Spark never writes (the
HDFS-backed store refuses checkpoint ids). Its files are listed, never read or changed."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.format.providers import ROCKSDB_FILES, Provider
from checkpoint.format.states.base import Action, StateFormat
from checkpoint.format.states.kinds import LISTED, NAMED, Engine, Recovery, Unread

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

    @property
    def recovery(self) -> Recovery:
        return NAMED if self.version == 2 else LISTED

    def names_by(self, unique_id: str | None) -> bool:
        return (unique_id is not None) == (self.version == 2)

    @property
    def engine(self) -> Engine:
        # Fail closed: nothing that depends on how the state is held runs on it.
        return Unread(self._why(": its state files are neither read nor changed"))

    def refusal(self, action: Action) -> str | None:
        return self._why(_WHY.get(action, ": its state files are not changed"))

    def _why(self, then: str) -> str:
        return f"the state store provider {self.pinned} is not Spark's{then}"


# Provider, version and class are filled in by `state_format_of`.
FOREIGN = ForeignFormat(Provider.OTHER, 1, ROCKSDB_FILES)
