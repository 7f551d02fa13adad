"""What a state format is: the questions the model, the analysis and every action ask of the way a
checkpoint keeps its state, answered once per format (one module each beside this one).

A format is a type, chosen once per checkpoint (`state_format_of`), and its methods carry what
differs between formats: how recovery finds a store's files (`recovery`) and what holds the state
(`engine`; both kinds in `kinds.py`), which file names are its own (`recognises`, `names_by`),
where Spark's `.crc` sidecar sits (`sidecar_of`), whether the Spark that wrote it matters
(`writer`), and what each action may do with it (`refusal`, `refuse`). Code elsewhere asks; it
never tests which format it holds (`tests/support/branches.py` counts the places that do)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from checkpoint.errors import (
    CompactionRefused,
    GcError,
    MigrationRefused,
    PurgeRefused,
    RebuildError,
    Refused,
    RepartitionRefused,
)
from checkpoint.format.layout import Classified, FileKind
from checkpoint.format.providers import Provider, StateFiles
from checkpoint.format.states.kinds import LISTED, ROCKSDB_INSTANCES, ByRecovery, Engine, Recovery

T = TypeVar("T")


class Action(StrEnum):
    """What may be asked of a format's state files; each refuses with its own error type."""

    READ = "read"  # validation's lineage and snapshot checks: its files read
    READINESS = "readiness"  # which Spark restarts it, told from its metadata
    CLEANUP = "cleanup"
    COMPACT_LIVE = "compact beside a running query"
    REBUILD = "rebuild in RocksDB"  # a snapshot written here, in RocksDB (compaction, purge)
    PROVIDER_SNAPSHOT = "snapshot by Spark's provider"  # a snapshot written by Spark's provider
    MIGRATE = "migrate to RocksDB V2"
    REPARTITION = "repartition"
    PURGE = "purge expired state"


_ERRORS: dict[Action, type[Refused]] = {
    Action.READ: Refused,
    Action.READINESS: Refused,
    Action.CLEANUP: GcError,
    Action.COMPACT_LIVE: CompactionRefused,
    Action.REBUILD: RebuildError,
    Action.PROVIDER_SNAPSHOT: RebuildError,
    Action.MIGRATE: MigrationRefused,
    Action.REPARTITION: RepartitionRefused,
    Action.PURGE: PurgeRefused,
}
# The file kinds whose names carry a version, and in format V2 the id the commit log records.
_VERSIONED = frozenset({FileKind.ZIP, FileKind.CHANGELOG, FileKind.DELTA, FileKind.SNAPSHOT})
# Spark's temp files are a format's to plan for where its names carry no attempt id: a listed
# format's. A named format's temp names carry the attempt's id, which no plan here can tell.
_TEMPS_ARE_OURS = ByRecovery(listed=True, named=False)


@dataclass(frozen=True)
class StateFormat:
    """One way Spark keeps a stateful query's state: a provider and a checkpoint format version.
    The base answers as Spark's formats mostly do; each format overrides where it differs."""

    provider: Provider
    version: int  # checkpointFormatVersion, as the commit log and the file names tell it
    # The file a provider's recovery starts from, and the one it replays on top.
    files: StateFiles

    @property
    def name(self) -> str:
        """`hdfs V1`, `rocksdb V2`: how reports and `--json` name it."""
        return f"{self.provider.value} V{self.version}"

    # -- how its files are found and named --------------------------------------------------------

    @property
    def recovery(self) -> Recovery:
        """How recovery finds a store's files: `LISTED` (V1: the store's folder listed) or `NAMED`
        (V2: from the commit log's ids and the changelog headers)."""
        return LISTED

    def reads_state_of(self, other: StateFormat) -> bool:
        """Whether a batch written in `other` has its state where this format's recovery reads it:
        the same version's names. A provider that differs alone makes no history (cleanup would
        keep less for it)."""
        return other.version == self.version

    def holds_state_of(self, other: StateFormat) -> bool:
        """Whether this format's state files are those of a batch written in `other`, for a copy of
        them to restart from: the same provider and version. A migrated checkpoint keeps the logs
        of the batches before its migration, in the source's format, not their state files."""
        return other == self

    def names_by(self, unique_id: str | None) -> bool:
        """Whether a state file named with `unique_id` (None: no id) is one this format writes."""
        return unique_id is None

    def named(self, items: Iterable[tuple[T, str | None]]) -> Iterator[tuple[T, str | None]]:
        """Each (item, id) whose id (None: no id) names a state file as this format names them;
        the others are skipped (a commit naming no id for a store of a named format, say)."""
        return ((item, unique_id) for item, unique_id in items if self.names_by(unique_id))

    def refuse_unnamed(
        self, unique_id: str | None, action: Action, why: Callable[[], str], where: str
    ) -> None:
        """Raises `action`'s typed refusal, saying `why()`, when no state file of this format is
        named with `unique_id`: what the action was handed is not this format's to act on."""
        if not self.names_by(unique_id):
            raise _ERRORS[action](why(), where)

    def recognises(self, what: Classified) -> bool:
        """Whether a state folder's file is this format's to plan for: a versioned file named as
        it names them, Spark's temp files where its names carry no attempt id; the rest is
        every format's (SSTs, sidecars, metadata)."""
        if what.kind in _VERSIONED:
            return self.names_by(what.unique_id)
        return what.kind != FileKind.SPARK_TEMP or self.recovery.of(_TEMPS_ARE_OURS)

    def sidecar_of(self, rel: str) -> str | None:
        """The `.crc` Spark writes beside a state file, or None where it writes none (a copy is
        then proven by decoding the file)."""
        return None

    def fork_decode(self, kind: FileKind) -> FileKind | None:
        """How a fork proves its copy of a state file: by decoding it as `kind` where Spark wrote
        no sidecar, else (None) against the sidecar."""
        return kind

    # -- what holds the state ---------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """What holds the state: `ROCKSDB_INSTANCES` (zips of SSTs; changelogs of RocksDB's
        encoding, whose values lead with its encoding's version byte) or `UNSAFE_ROW_MAPS` (the
        HDFS-backed store's, snapshots written by Spark's provider)."""
        return ROCKSDB_INSTANCES

    def writer(self, read: Callable[[], T]) -> T | None:
        """What `read` tells of the Spark that wrote a store, where this format's readers care
        (V2: Spark 4.0 refuses a zip whose metadata a later Spark writes); None where any Spark 4.x
        writes what this release writes."""
        return None

    # -- what each action may do ------------------------------------------------------------------

    def refusal(self, action: Action) -> str | None:
        """Why this format refuses `action`, or None."""
        return None

    def on_refusal(self, action: Action, then: Callable[[str], T]) -> T | None:
        """`then(why)` where this format refuses `action` (a refusal of the caller's own, raised or
        returned as a finding); None where it allows it."""
        why = self.refusal(action)
        return None if why is None else then(why)

    def unless_refused(self, action: Action, work: Callable[[], list[T]]) -> list[T]:
        """What `work` finds, or nothing where this format refuses `action`: a report of what the
        action would do has nothing to count there."""
        return [] if self.refusal(action) is not None else work()

    def refuse(self, action: Action, where: str, subject: str = "") -> None:
        """Raises `action`'s typed refusal when this format refuses it, the reason after
        `subject` (a store, say) when one is given."""
        why = self.refusal(action)
        if why is not None:
            raise _ERRORS[action](f"{subject}: {why}" if subject else why, where)
