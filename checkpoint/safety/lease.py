"""The maintenance lease: one writing action per checkpoint at a time (docs/safety.md).

Every action that writes or deletes (compaction, cleanup apply, a fork's source and destination)
takes the checkpoint's lease before it plans. Its identity is the checkpoint's normalized URL
(`Storage.url`), and it lives in one place whatever the audit settings: beside the checkpoint, in
`_ckpt_audit/<name>-<digest>/lease/<generation>.json`, so the CLI and every Dagster deployment meet
there however they spell the path.

One holder, ever:
- each generation is created with write-if-absent (exclusive create on local disks, a conditional
  PUT `If-None-Match: *` on S3), so of two actions that race for a generation exactly one wins;
- generation numbers never repeat: giving the lease back writes the next generation as a
  "released" marker instead of emptying the folder, and only generations older than the newest two
  are ever deleted, so a folder never starts counting again from 1;
- a generation won is held only once a listing after the write shows it as the newest. A local
  directory listed while others create and delete in it may miss entries (readdir promises only
  those that exist throughout), so an acquirer can see an empty or stale folder and win a number
  that was used and deleted long ago; the listing after the write names the newer generation, and
  the stale one is withdrawn;
- a holder acts only while its own token is in the newest generation and its own expiry (the last
  renewal that succeeded, less a margin) has not passed: `check()` raises LeaseLost otherwise, and
  actions call it before each change. Renewal rewrites the holder's own generation only (on S3 a
  conditional PUT `If-Match` on the ETag it wrote), and a renewal that fails is retried soon, but
  never stretches the expiry.

A lease past its expiry (a holder killed with -9) is taken over by creating the next generation; the
takeover is appended to `lease-takeovers.jsonl`. The expiry is the holder's clock; a taker whose
clock runs ahead would read a live lease as expired. So a takeover also needs the holder's record to
have gone unwritten for the holder's TTL by the storage's own clock (`Storage.now`: the mtime of a
probe, against the record's mtime), the one clock both sides' writes are stamped with. A holder
renews every third of its TTL and stops acting at 80 % of it after its last renewal, by elapsed
time on its own clock, so no offset between any two clocks lets both act.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import NoReturn

from checkpoint import bounds
from checkpoint.errors import CheckpointError, LeaseHeld, LeaseLost, LeaseRefused, LeaseUnreadable
from checkpoint.format import MAINT_TEMP_PREFIX, RECORD_BYTES, is_number
from checkpoint.policy import POLICY
from checkpoint.safety.naming import own_place
from checkpoint.storage import Storage

log = logging.getLogger(__name__)

# The shortest time to live a lease may be given: shorter, it expires between a holder's check and
# its next change.
MIN_TTL_SECONDS = 0.5


# A holder stops acting this fraction of its TTL before its own expiry: a takeover needs the whole
# TTL to pass, so a check that passes leaves the holder this long for its next change.
_SAFETY_MARGIN = 0.2


def lease_for(checkpoint: Storage, owner: str, **options) -> Lease:
    """The maintenance lease of the checkpoint at `checkpoint`, kept beside it (see above). Its
    identity is the resolved location, not the spelling: a symlinked path, or another case on a
    file system that ignores case, finds the same lease (docs/safety.md, "one checkpoint, one identity")."""
    storage, folder = own_place(checkpoint)
    return Lease(storage, folder, owner, **options)


@dataclass(frozen=True)
class Holder:
    owner: str  # what holds it: "ckpt gc --apply", "dagster run <id> (checkpoint_compaction)"
    host: str
    pid: int
    token: str
    started: float
    expires: float
    released: bool = False  # a marker that keeps the generation count going once it is given back
    ttl: float = 0.0  # the holder's own TTL; 0 in records written before it was kept

    def describe(self, now: float) -> str:
        left = self.expires - now
        until = f"expires in {left:.0f} s" if left > 0 else f"expired {-left:.0f} s ago"
        return f"{self.owner} on {self.host} (pid {self.pid}), since {time.ctime(self.started)}, {until}"


class Lease:
    """One action's hold on one checkpoint's lease. Use as a context manager, or acquire/release.

    `folder` is the checkpoint's folder in `storage` (see `lease_for`). `clock` and `sleep` are
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
        try:  # a lease that lasts no time is lost before its holder acts, and locks the next one out
            bounds.seconds(ttl, "the lease's time to live", low=MIN_TTL_SECONDS)
        except bounds.OutOfRange as exc:
            raise LeaseRefused(f"{exc}: nothing was done", storage.url) from exc
        self.storage, self.folder, self.owner, self.ttl = storage, f"{folder}/lease", owner, ttl
        self.clock, self.sleep = clock, sleep
        self.token = uuid.uuid4().hex
        self.generation: int | None = None
        self.took_over: Holder | None = None
        self._started = 0.0
        self._expires = 0.0  # of the last write that succeeded
        self._etag: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: str | None = None

    @property
    def location(self) -> str:
        return self.storage.full(self.folder)

    # Reading the lease

    def _generations(self) -> list[int]:
        names = (f.rel.rsplit("/", 1)[1] for f in self.storage.list_dir(self.folder).files)
        return sorted(int(n[: -len(".json")]) for n in names if n.endswith(".json") and is_number(n[:-5]))

    def _rel(self, generation: int) -> str:
        return f"{self.folder}/{generation:012d}.json"

    def _read(self, generation: int) -> Holder | None:
        path = self.storage.full(self._rel(generation))
        try:
            raw = self.storage.read_if_exists(self._rel(generation), limit=RECORD_BYTES)
            if raw is None:
                return None
            return Holder(**json.loads(raw))
        except (CheckpointError, ValueError, TypeError) as exc:  # never read as free: someone may hold it
            raise LeaseUnreadable(
                f"unreadable maintenance lease ({exc}): when no action holds this checkpoint (none runs on "
                f"it), delete {path} and run again",
                path,
            ) from exc

    def _newest(self) -> tuple[int, Holder] | None:
        """The newest generation and what it says (a holder, or a released marker)."""
        for _ in range(5):
            generations = self._generations()
            if not generations:
                return None
            holder = self._read(generations[-1])
            if holder is not None:
                return generations[-1], holder
            # Only generations below the newest are ever deleted: the listing is already stale.
        raise CheckpointError("the maintenance lease kept changing while it was read", self.location)

    def current(self) -> tuple[int, Holder] | None:
        """The newest generation and its holder, or None when nobody holds the lease."""
        found = self._newest()
        return None if found is None or found[1].released else found

    # Taking, renewing, giving back

    def _body(self, expires: float, *, released: bool = False) -> bytes:
        holder = Holder(self.owner, socket.gethostname(), os.getpid(), self.token,
                        self._started, expires, released, self.ttl)  # fmt: skip
        return json.dumps(asdict(holder)).encode()

    def acquire(self, wait: float = 0.0, poll: float = 2.0) -> Lease:
        """Takes the lease, waiting up to `wait` seconds while another action holds it; raises
        LeaseHeld naming the holder when it is still held after that."""
        deadline = self.clock() + wait
        while True:
            now = self.clock()
            found = self._newest()
            held = found is not None and not found[1].released and self._still_held(*found, now)
            if held:
                if now >= deadline:
                    assert found is not None
                    raise LeaseHeld(f"another action holds the maintenance lease: {found[1].describe(now)}"
                                    f"{held if isinstance(held, str) else ''}", self.location)  # fmt: skip
                self.sleep(min(poll, deadline - now))
                continue
            generation = (found[0] + 1) if found else 1
            self._started = now
            try:
                self._etag = self.storage.write_if_absent(
                    self._rel(generation), self._body(now + self.ttl), MAINT_TEMP_PREFIX
                )
            except FileExistsError:
                continue  # another action took this generation first: look again
            if not self._newest_is(generation):
                self._withdraw(generation)
                continue  # the listing before the write was stale: look again
            self.generation, self._expires, self._lost = generation, now + self.ttl, None
            self.took_over = found[1] if found and not found[1].released else None
            if self.took_over is not None:
                self._record_takeover(self.took_over, now)
            self._forget_older(generation)
            return self

    def _still_held(self, generation: int, holder: Holder, now: float) -> bool | str:
        """Whether a holder's lease stands: its expiry not passed by this host's clock, or its record
        written less than its TTL ago by the storage's clock (then a reason, for the message)."""
        if holder.expires > now:
            return True
        ttl = holder.ttl or self.ttl
        written = self.storage.stat(self._rel(generation))
        if written is None:
            return False  # gone since the listing: the next round reads the folder again
        storage_now = self.storage.now(self.folder, MAINT_TEMP_PREFIX)
        if written.mtime is None or storage_now is None:
            return "; this storage keeps no modification times, so no takeover can rule out clock skew"
        silent = storage_now - written.mtime
        if silent >= ttl:
            return False
        return (f"; its expiry passed by this host's clock, but the storage's clock saw it written "
                f"{silent:.0f} s ago, less than its TTL ({ttl:.0f} s): the clocks disagree, and it "
                f"is taken over only after {ttl - silent:.0f} s more without a renewal")  # fmt: skip

    def _record_takeover(self, expired: Holder, now: float) -> None:
        entry = {"at": now, "generation": self.generation, "taken_by": self.owner, "pid": os.getpid(),
                 "host": socket.gethostname(), "expired_holder": asdict(expired)}  # fmt: skip
        self.storage.append(f"{self.folder}-takeovers.jsonl", (json.dumps(entry) + "\n").encode())

    def _newest_is(self, generation: int) -> bool:
        try:
            found = self._newest()
        except CheckpointError:
            self._withdraw(generation)  # not known to be held: not left to block others till expiry
            raise
        return found is not None and found[0] == generation

    def _withdraw(self, generation: int) -> None:
        """Deletes a generation this action just won below the newest: nobody reads it as the
        lease, and leaving it would only wait for the next holder's `_forget_older`."""
        self.storage.delete_batch([self._rel(generation)])

    def _forget_older(self, generation: int) -> None:
        # The one below stays too: a listing that misses the newest (created while it ran) still
        # finds its predecessor, so the count does not restart from a folder that looks empty.
        older = [self._rel(g) for g in self._generations() if g < generation - 1]
        if older:
            self.storage.delete_batch(older)  # expired or released generations; failures are harmless

    def _lose(self, why: str) -> NoReturn:
        self._lost = why
        raise LeaseLost(f"maintenance lease lost: {why}; stopping", self.location)

    def check(self) -> None:
        """Raises LeaseLost unless this action still holds the lease: its token in the newest
        generation, and its own expiry not passed (call before each change)."""
        if self._lost is not None:
            raise LeaseLost(f"maintenance lease lost: {self._lost}; stopping", self.location)
        if self.generation is None:
            raise LeaseLost("maintenance lease not held", self.location)
        if self.clock() >= self._expires - _SAFETY_MARGIN * self.ttl:
            self._lose("its expiry passed without a renewal that succeeded")
        found = self._newest()
        if found is None or found[0] != self.generation:
            newer = f"generation {found[0]}" if found else "no generation"
            self._lose(f"{newer} is the newest, this action holds {self.generation}")
        if found[1].token != self.token or found[1].released:
            self._lose(f"generation {self.generation} names another holder")

    def renew(self) -> None:
        """Extends this holder's own expiry by the TTL from now; raises LeaseLost when the lease is
        no longer its own, StorageError when the write failed (the expiry then stays as it was)."""
        self.check()
        assert self.generation is not None  # check() raised otherwise
        now = self.clock()
        try:
            self._etag = self.storage.replace_own(
                self._rel(self.generation), self._body(now + self.ttl), self._etag, MAINT_TEMP_PREFIX
            )
        except FileExistsError:  # S3's If-Match failed: someone else wrote this generation
            self._lose(f"generation {self.generation} changed under its holder")
        self._expires = now + self.ttl

    def release(self) -> None:
        """Gives the lease back: the next generation becomes a released marker, so the count goes
        on. Does nothing when the lease is no longer this holder's. Never raises for the storage:
        it runs as an action ends, and the action's own message (a refusal, a disk that filled) is
        what the caller must see. When the marker cannot be written, this holder's generation is
        deleted instead (a delete needs no room on a full disk), and when that fails too, one
        line says where the lease is and how to release it."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.generation is None or self._lost is not None:
            self.generation = None
            return
        try:
            self.check()
            marker = self.generation + 1
            self.storage.write_if_absent(
                self._rel(marker), self._body(self.clock(), released=True), MAINT_TEMP_PREFIX
            )
            self._forget_older(marker)
        except (LeaseLost, FileExistsError):
            pass  # no longer ours: nothing of it to give back
        except CheckpointError as exc:
            self._give_back_by_delete(self.generation, exc)
        finally:
            self.generation = None

    def _give_back_by_delete(self, generation: int, why: CheckpointError) -> None:
        held = self.storage.full(self._rel(generation))
        try:
            failed = self.storage.delete_batch([self._rel(generation)])
        except CheckpointError as exc:
            failed = {held: str(exc)}
        if not failed:
            log.info("%s: released by deleting generation %d (the released marker could not be written: %s)",
                     self.location, generation, why)  # fmt: skip
            return
        log.warning("ckpt: the maintenance lease %s could not be released (%s); it expires at %s by this "
                    "host's clock, or delete %s to release it now", self.location, why,
                    time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._expires)), held)  # fmt: skip

    def _renew_loop(self) -> None:
        period = self.ttl / 3
        while not self._stop.wait(period):
            try:
                self.renew()
                period = self.ttl / 3
            except LeaseLost:
                return
            except CheckpointError:
                # Retried soon; meanwhile the expiry stays where the last renewal put it, and
                # check() stops the action once it is near.
                period = max(0.05, self.ttl / 20)

    def __enter__(self) -> Lease:
        if self.generation is None:
            self.acquire()
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="ckpt-lease-renewal", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
