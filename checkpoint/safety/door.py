"""The doors of the actions: the adapter translates its arguments into one request, and the door
takes the leases, in one order, before the action reads anything, and hands the action their
`check`. `Request`: an action that writes a new checkpoint from another (fork, migration), an
overlap refused first. `InPlace`: an action that changes one checkpoint where it is (compaction,
cleanup, repartition)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from checkpoint.errors import ForkRefused
from checkpoint.safety.lease import Lease, lease_for
from checkpoint.storage import Storage

# How an adapter takes a checkpoint's lease for an action: the CLI waits `--wait`, Dagster waits
# and then retries the step. The door decides which and in what order.
TakeLease = Callable[[Storage, str], AbstractContextManager[Lease]]


@dataclass(frozen=True)
class Request:
    """SRC, read (its lease keeps a cleanup from deleting what is copied); DEST, written (its lease
    keeps two writers apart); `take`, this adapter's way of taking a lease."""

    src: Storage
    dest: Storage
    take: TakeLease

    @contextmanager
    def held(self, what: str) -> Iterator[Callable[[], None]]:
        """The overlap refused, then SRC's lease and DEST's; yields the `check` of both, which the
        action calls before each thing it publishes."""
        refuse_overlap(self.src, self.dest)
        with self.take(self.src, f"{what} (source)") as held, self.take(self.dest, what) as lease:

            def check() -> None:
                held.check()
                lease.check()

            yield check


@dataclass(frozen=True)
class InPlace:
    """One checkpoint, changed where it is, and `take`, this adapter's way of taking its lease."""

    storage: Storage
    take: TakeLease

    @contextmanager
    def held(self, what: str) -> Iterator[Callable[[], None]]:
        """The checkpoint's lease; yields its `check`, which the action calls before each thing it
        publishes."""
        with self.take(self.storage, what) as lease:
            yield lease.check


def refuse_overlap(src: Storage, dest: Storage) -> None:
    """A destination inside the source (or around it) would copy into what it reads: refused before
    anything, leases included, is written."""
    a, b = src.root.rstrip("/") + "/", dest.root.rstrip("/") + "/"
    if src.protocol == dest.protocol and (a.startswith(b) or b.startswith(a)):
        raise ForkRefused(f"the destination and the source overlap ({src.url})", dest.url)


def taken_at_once(owner: str) -> TakeLease:
    """Leases taken without waiting, by `owner` (a library caller, a test, a bench)."""
    return lambda storage, what: lease_for(storage, f"{owner} ({what})").acquire()
