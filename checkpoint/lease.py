"""The maintenance lease: one writing action per checkpoint at a time (shared/docs/safety.md).

Every action that writes or deletes (compaction, cleanup apply) takes the checkpoint's lease before
it plans. The lease lives beside the checkpoint's audit trail, never inside the checkpoint:
`<audit folder>/lease/<generation>.json`, each generation created with write-if-absent (exclusive
create on local disks, a conditional PUT `If-None-Match: *` on S3), so of two actions that race
for the same generation exactly one wins, across processes, hosts and deployments. The newest
generation is the lease; it names its holder and an expiry. The holder renews it while the action
runs and deletes it when done. A lease past its expiry (a holder killed with -9) is taken over by
creating the next generation, and the takeover is recorded in `lease-takeovers.jsonl`.

A holder that finds a newer generation than its own has lost the lease (it failed to renew in
time): `Lease.check()` raises, and actions call it before each step that changes anything.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .errors import CheckpointError
from .policy import POLICY
from .storage import Storage

_TEMP_PREFIX = ".ckpt-maint-"


class LeaseHeld(CheckpointError):
    """Another action holds the checkpoint's lease: nothing was done."""


class LeaseLost(CheckpointError):
    """This action's lease expired and was taken over: it must stop before changing anything more."""


@dataclass(frozen=True)
class Holder:
    owner: str  # what holds it: "ckpt gc --apply", "dagster run <id> (checkpoint_compaction)"
    host: str
    pid: int
    token: str
    started: float
    expires: float

    def describe(self, now: float) -> str:
        left = self.expires - now
        until = f"expires in {left:.0f} s" if left > 0 else f"expired {-left:.0f} s ago"
        return f"{self.owner} on {self.host} (pid {self.pid}), since {time.ctime(self.started)}, {until}"


class Lease:
    """One action's hold on one checkpoint's lease. Use as a context manager, or acquire/release.

    `folder` is the checkpoint's folder in the audit trail's storage. `clock` and `sleep` are
    injected so tests can run expiry scenarios on a manual clock.
    """

    def __init__(
        self,
        storage: Storage,
        folder: str,
        owner: str,
        ttl: float = POLICY.lease_ttl_seconds,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.storage, self.folder, self.owner, self.ttl = storage, f"{folder}/lease", owner, ttl
        self.clock, self.sleep = clock, sleep
        self.token = uuid.uuid4().hex
        self.generation: int | None = None
        self.took_over: Holder | None = None
        self._started = 0.0
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: str | None = None

    # Reading the lease

    def _generations(self) -> list[int]:
        names = (f.rel.rsplit("/", 1)[1] for f in self.storage.list_dir(self.folder).files)
        return sorted(int(n[: -len(".json")]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def _rel(self, generation: int) -> str:
        return f"{self.folder}/{generation:012d}.json"

    def _read(self, generation: int) -> Holder | None:
        raw = self.storage.read_if_exists(self._rel(generation))
        if raw is None:
            return None
        try:
            return Holder(**json.loads(raw))
        except (ValueError, TypeError) as exc:  # never read as free: someone may hold it
            path = self.storage.full(self._rel(generation))
            raise CheckpointError(
                f"unreadable maintenance lease: {exc}; remove it by hand if stale", path
            ) from exc

    def current(self) -> tuple[int, Holder] | None:
        """The newest generation and its holder, or None when nobody holds the lease."""
        for generation in reversed(self._generations()):
            holder = self._read(generation)
            if holder is not None:
                return generation, holder
        return None

    # Taking, renewing, giving back

    def _body(self) -> bytes:
        now = self.clock()
        holder = Holder(
            self.owner, socket.gethostname(), os.getpid(), self.token, self._started or now, now + self.ttl
        )
        return json.dumps(asdict(holder)).encode()

    def acquire(self, wait: float = 0.0, poll: float = 2.0) -> Lease:
        """Takes the lease, waiting up to `wait` seconds while another action holds it; raises
        LeaseHeld naming the holder when it is still held after that."""
        deadline = self.clock() + wait
        while True:
            now = self.clock()
            found = self.current()
            if found is not None and found[1].expires > now:
                if now >= deadline:
                    raise LeaseHeld(f"another action holds the maintenance lease: {found[1].describe(now)}",
                                    self.storage.full(self.folder))  # fmt: skip
                self.sleep(min(poll, deadline - now))
                continue
            generation = (found[0] + 1) if found else 1
            self._started = now
            try:
                self.storage.write_if_absent(self._rel(generation), self._body(), _TEMP_PREFIX)
            except FileExistsError:
                continue  # another action took this generation first: look again
            self.generation = generation
            self.took_over = found[1] if found else None
            if self.took_over is not None:
                self._record_takeover(self.took_over, now)
            self._forget_older(generation)
            return self

    def _record_takeover(self, expired: Holder, now: float) -> None:
        entry = {"at": now, "generation": self.generation, "taken_by": self.owner, "pid": os.getpid(),
                 "host": socket.gethostname(), "expired_holder": asdict(expired)}  # fmt: skip
        self.storage.append(f"{self.folder}-takeovers.jsonl", (json.dumps(entry) + "\n").encode())

    def _forget_older(self, generation: int) -> None:
        older = [self._rel(g) for g in self._generations() if g < generation]
        if older:
            self.storage.delete_batch(older)  # expired or released generations; failures are harmless

    def check(self) -> None:
        """Raises LeaseLost when this action no longer holds the lease (call before each change)."""
        if self._lost is None and self.generation is not None:
            newer = [g for g in self._generations() if g > self.generation]
            if newer:
                self._lost = f"generation {newer[-1]} was taken after this lease expired"
        if self._lost is not None:
            raise LeaseLost(f"maintenance lease lost: {self._lost}; stopping", self.storage.full(self.folder))

    def renew(self) -> None:
        """Extends the expiry by the TTL from now, unless the lease was lost meanwhile."""
        self.check()
        self.storage.write(self._rel(self.generation), self._body())  # type: ignore[arg-type]

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.generation is not None and self._lost is None:
            self.storage.delete_batch([self._rel(self.generation)])
        self.generation = None

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.renew()
            except LeaseLost:
                return
            except CheckpointError:
                continue  # a failed write is retried at the next beat; the lease is valid meanwhile

    def __enter__(self) -> Lease:
        if self.generation is None:
            self.acquire()
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="ckpt-lease-renewal", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
