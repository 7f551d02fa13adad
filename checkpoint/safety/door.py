"""The doors of the actions: the adapter translates its arguments into one request, and the door
takes the leases, in one order, before the action reads anything, and hands the action their
`check`. `TwoSided`: an action that writes a new checkpoint from another (fork, migration), an
overlap refused first. `InPlace`: an action that changes one checkpoint where it is (compaction,
cleanup, repartition). An action that keeps records (cleanup, repartition, migration, retirement,
purge) is handed its audit trail by the door too, which refuses, by place and before it takes a
lease, a trail at or inside a checkpoint the action touches: records there would be files the
checkpoint's logs do not name, and a cleanup, a retirement or a migration started over deletes
such files. An action run inside another's door (a repartition's backup fork, a retirement's
archive) goes through its own door too, with the leases the outer one holds (`held_by`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from checkpoint.safety.lease import lease_for
from checkpoint.safety.place import refuse_inside, refuse_overlap
from checkpoint.safety.trail import AuditTrail
from checkpoint.storage import Storage


class Held(Protocol):
    """A lease as an action sees it: `check` raises LeaseLost once another holder took it over."""

    def check(self) -> None: ...


# How an adapter takes a checkpoint's lease for an action: the CLI waits `--wait`, Dagster waits
# and then retries the step. The door decides which and in what order.
TakeLease = Callable[[Storage, str], AbstractContextManager[Held]]


@dataclass(frozen=True)
class TwoSided:
    """SRC, read (its lease keeps a cleanup from deleting what is copied); DEST, written (its lease
    keeps two writers apart); `take`, this adapter's way of taking a lease."""

    src: Storage
    dest: Storage
    take: TakeLease
    trail: AuditTrail | None = None  # where the action's records go; None: it keeps none
    dest_is: str = "the destination"  # what refusals call DEST (a retirement's: "the archive")

    @contextmanager
    def held(self, what: str) -> Iterator[Callable[[], None]]:
        """A store that takes no writes refused, the overlap refused by place, a trail at or inside
        either side refused, then SRC's lease and DEST's; yields the `check` of both, which the
        action calls before each thing it publishes."""
        self.src.refuse_writes()  # the source's lease is written there
        self.dest.refuse_writes()
        refuse_overlap(self.src, self.dest, self.dest_is)
        _refuse_trail_inside(self.trail, (self.src, "the source"), (self.dest, self.dest_is))
        with self.take(self.src, f"{what} (source)") as held, self.take(self.dest, what) as lease:

            def check() -> None:
                held.check()
                lease.check()

            yield check

    def audit_trail(self) -> AuditTrail:
        return _required(self.trail)


@dataclass(frozen=True)
class InPlace:
    """One checkpoint, changed where it is, `take`, this adapter's way of taking its lease, and
    the trail of an action that keeps records."""

    storage: Storage
    take: TakeLease
    trail: AuditTrail | None = None  # where the action's records go; None: it keeps none

    @contextmanager
    def held(self, what: str) -> Iterator[Callable[[], None]]:
        """The place checked (`check_place`), then the checkpoint's lease taken;
        yields its `check`, which the action calls before each thing it publishes."""
        self.check_place()
        with self.take(self.storage, what) as lease:
            yield lease.check

    def check_place(self) -> None:
        """A store that takes no writes refused, then a trail at or inside the checkpoint: called
        by the door, and by a plan (which takes no lease) before it writes its manifest."""
        self.storage.refuse_writes()
        _refuse_trail_inside(self.trail, (self.storage, "the source"))

    def audit_trail(self) -> AuditTrail:
        return _required(self.trail)

    def refuse_inside(self, folder: Storage, what: str) -> None:
        """A folder the action will make its own in (a rehearsal's scratch) refused at or inside
        the checkpoint, by place: called before the action makes anything."""
        refuse_inside(self.storage, folder, what)


def _refuse_trail_inside(trail: AuditTrail | None, *sides: tuple[Storage, str]) -> None:
    if trail is None:
        return
    for storage, side in sides:
        refuse_inside(storage, trail.storage, "the audit trail", side)


def _required(trail: AuditTrail | None) -> AuditTrail:
    """The trail of an action that keeps records: its adapter names one (a door without one is a
    caller's mistake, never a run's)."""
    if trail is None:
        raise TypeError("this action keeps records: its door needs the audit trail")
    return trail


@dataclass(frozen=True)
class EachInPlace:
    """Several checkpoints, each changed where it is (a backfill, a fleet's maintenance): the
    adapter's names for them (paths, partition keys), and the door of each, made when its turn
    comes (a name that names no checkpoint is then refused like one that cannot be read)."""

    names: Sequence[str]
    door: Callable[[str], InPlace]


@dataclass(frozen=True)
class _Outer:
    check: Callable[[], None]


def held_by(check: Callable[[], None]) -> TakeLease:
    """The leases of an outer action, held already: the inner action's door takes nothing, and its
    `check` is the outer one's."""

    @contextmanager
    def take(storage: Storage, what: str) -> Iterator[Held]:
        yield _Outer(check)

    return take


def taken_at_once(owner: str) -> TakeLease:
    """Leases taken without waiting, by `owner` (a library caller, a test, a bench)."""
    return lambda storage, what: lease_for(storage, f"{owner} ({what})").acquire()
