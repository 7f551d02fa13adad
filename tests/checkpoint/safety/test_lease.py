"""The maintenance lease: one writing action per checkpoint, across processes and deployments.

Scenarios run against a manual clock where time matters; the CLI and a process killed with -9 run
for real on a copy of a corpus checkpoint.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from checkpoint.errors import LeaseHeld, LeaseLost, StorageError
from checkpoint.safety.lease import Lease, lease_for
from checkpoint.storage import Storage
from tests.support.cli import ckpt


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _lease(root: Path, owner: str, clock: Clock, ttl: float = 60) -> Lease:
    return Lease(Storage(str(root)), "ckpt-0001", owner, ttl=ttl, clock=clock, sleep=clock.sleep)


def _unwritten_for(root: Path, seconds: float) -> None:
    """The storage's clock saw no write to the lease for `seconds`: its files back-dated, as a
    manual clock cannot move the clock that stamps mtimes."""
    for path in (root / "ckpt-0001" / "lease").iterdir():
        stamp = path.stat().st_mtime - seconds
        os.utime(path, (stamp, stamp))


def test_one_holder_at_a_time_and_an_expired_lease_is_taken_over(tmp_path) -> None:
    clock = Clock()
    a, b = _lease(tmp_path, "ckpt gc --apply", clock), _lease(tmp_path, "dagster run r1 (cleanup)", clock)
    a.acquire()
    with pytest.raises(LeaseHeld, match=r"ckpt gc --apply on .* \(pid \d+\).*expires in 60 s"):
        b.acquire()
    clock.now += 45
    a.renew()  # 60 s from now again
    clock.now += 45
    with pytest.raises(LeaseHeld, match="expires in 15 s"):
        b.acquire()
    clock.now += 16  # a stopped renewing (killed): its lease expired
    _unwritten_for(tmp_path, 61)
    b.acquire()
    assert b.generation == a.generation + 1 and b.took_over.owner == "ckpt gc --apply"
    takeovers = (tmp_path / "ckpt-0001" / "lease-takeovers.jsonl").read_text().splitlines()
    assert [json.loads(t)["expired_holder"]["owner"] for t in takeovers] == ["ckpt gc --apply"]
    with pytest.raises(LeaseLost, match="lease lost"):
        a.check()  # the old holder learns it before its next change
    a.release()  # gives back nothing that is not its own
    assert b.current()[1].owner == "dagster run r1 (cleanup)"
    held_by_b = b.generation
    b.release()
    assert b.current() is None
    after = _lease(tmp_path, "next", clock).acquire()  # free again, and the count goes on
    assert after.generation == held_by_b + 2  # b's release wrote a marker generation between


def test_a_stray_file_in_the_lease_folder_is_no_generation(tmp_path) -> None:
    """Only `<ASCII digits>.json` counts: a superscript digit passes `str.isdigit` and then stops
    `int()` with a bare ValueError."""
    clock = Clock()
    folder = tmp_path / "ckpt-0001" / "lease"
    folder.mkdir(parents=True)
    for stray in ("\u00b2.json", "\u0663.json", "notes.json"):
        (folder / stray).write_text("{}")
    lease = _lease(tmp_path, "ckpt gc --apply", clock).acquire()
    assert lease.generation == 1 and lease.current()[1].owner == "ckpt gc --apply"


def test_the_aba_sequence_leaves_one_holder(tmp_path) -> None:
    """A stalls; B takes over and gives back; D takes the free lease; A wakes up. Before, the folder
    emptied, D got generation 1 again, and A's check and renewal passed: two holders."""
    clock = Clock()
    a = _lease(tmp_path, "A", clock)
    a.acquire()
    clock.now += 61  # A stalls past its expiry
    _unwritten_for(tmp_path, 61)
    b = _lease(tmp_path, "B", clock).acquire()
    assert b.took_over.owner == "A"
    held_by_b = b.generation
    b.release()
    d = _lease(tmp_path, "D", clock).acquire()
    assert d.generation > held_by_b > a.generation  # generations never repeat
    # Even were A's clock to say it renewed in time, the newest generation is not its own.
    a._expires = clock.now + 60
    with pytest.raises(LeaseLost, match=f"generation {d.generation} is the newest"):
        a.check()
    with pytest.raises(LeaseLost):
        a.renew()
    a.release()  # gives back nothing: D's generation stays
    assert d.current()[1].owner == "D" and d.current()[0] == d.generation
    d.check()
    clock.now += 30
    d.renew()
    assert d.current()[1].expires == clock.now + 60


def test_a_listing_that_misses_the_newest_generations_wins_nothing(tmp_path) -> None:
    """A local folder listed while other acquirers create and delete in it can list as empty (a
    readdir returns only entries that exist throughout). B saw none, won generation 1 again (long
    deleted) and returned holding a lease that C held: caught by the 8-process hammer."""
    clock = Clock()
    _lease(tmp_path, "A", clock).acquire().release()
    c = _lease(tmp_path, "C", clock).acquire()
    b = _lease(tmp_path, "B", clock)
    real, listings = b._generations, iter([[]])
    b._generations = lambda: next(listings, None) or real()  # the first listing misses everything
    with pytest.raises(LeaseHeld, match="C on"):
        b.acquire()
    assert b.generation is None and b.current()[1].owner == "C"
    assert sorted(p.name for p in (tmp_path / "ckpt-0001" / "lease").iterdir()) == [
        f"{g:012d}.json" for g in (c.generation - 1, c.generation)
    ]  # B's stale generation 1 withdrawn; the released marker below C's kept
    c.check()


def test_a_stale_token_in_the_newest_generation_is_not_the_holders(tmp_path) -> None:
    clock = Clock()
    a = _lease(tmp_path, "A", clock).acquire()
    forged = json.loads(Path(a.storage.full(a._rel(a.generation))).read_text())
    Path(a.storage.full(a._rel(a.generation))).write_text(json.dumps({**forged, "token": "someone else"}))
    with pytest.raises(LeaseLost, match="names another holder"):
        a.check()


def test_renewals_that_keep_failing_stop_the_holder_before_its_expiry(tmp_path, monkeypatch) -> None:
    clock = Clock()
    a = _lease(tmp_path, "A", clock)
    a.acquire()
    monkeypatch.setattr(a.storage, "replace_own", _fail)
    clock.now += 20
    with pytest.raises(StorageError):
        a.renew()  # the write failed: the expiry stays at acquire + 60
    clock.now += 20
    a.check()  # 20 s left: still held
    clock.now += 8
    with pytest.raises(LeaseLost, match="expiry passed without a renewal"):
        a.check()  # 12 s left, inside the margin: a taker needs only 12 s more, so stop now
    b = _lease(tmp_path, "B", clock)
    with pytest.raises(LeaseHeld):
        b.acquire()  # the stopped holder's lease still stands until its expiry ...
    clock.now += 13
    _unwritten_for(tmp_path, 61)
    b.acquire()  # ... and is taken over after it
    with pytest.raises(LeaseLost):
        a.check()


def test_a_taker_whose_clock_runs_ahead_waits_for_the_storages_clock(tmp_path) -> None:
    """The expiry is the holder's clock; a taker 10 minutes ahead reads it as passed. The holder's
    record, written a moment ago by the storage's clock, keeps the lease until it has gone a whole
    TTL unwritten."""
    holder_clock, ahead = Clock(), Clock()
    ahead.now += 600
    a = _lease(tmp_path, "A", holder_clock).acquire()
    b = _lease(tmp_path, "B", ahead)
    with pytest.raises(
        LeaseHeld,
        match=r"expired 540 s ago; its expiry passed by this host's clock, but "
        r"the storage's clock saw it written 0 s ago.*after 60 s more",
    ):
        b.acquire()
    holder_clock.now += 30
    a.renew()
    a.check()  # still its own
    _unwritten_for(tmp_path, 40)
    with pytest.raises(LeaseHeld, match="after 20 s more"):
        b.acquire()
    _unwritten_for(tmp_path, 20)  # A stopped renewing a whole TTL ago
    b.acquire()
    assert b.took_over.owner == "A" and b.took_over.ttl == 60
    assert not list((tmp_path / "ckpt-0001" / "lease").glob(".*clock*"))  # the probes are gone


def _fail(*args, **kwargs):
    raise StorageError("write failed: injected", "lease")


def test_the_renewal_thread_stops_the_action_when_its_writes_fail(tmp_path, monkeypatch) -> None:
    lease = Lease(Storage(str(tmp_path)), "ckpt", "slow action", ttl=1.0)
    with lease:
        monkeypatch.setattr(lease.storage, "replace_own", _fail)
        lease.check()
        time.sleep(1.0)  # renewals fail all along: past expiry minus the margin
        with pytest.raises(LeaseLost, match="expiry passed"):
            lease.check()


def test_waiting_for_a_lease_until_its_holder_lets_go(tmp_path) -> None:
    clock = Clock()
    a, b = _lease(tmp_path, "holder", clock), _lease(tmp_path, "waiter", clock)
    a.acquire()
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds
        if len(slept) == 3:
            a.release()

    b.sleep = sleep
    b.acquire(wait=30, poll=2)
    assert slept == [2, 2, 2] and b.current()[1].owner == "waiter"
    with pytest.raises(LeaseHeld):
        _lease(tmp_path, "late", clock).acquire(wait=10, poll=4)  # gives up after its wait


def _race(root: Path, folder: str, racers: int) -> list[int]:
    """`racers` threads take the same lease at the same moment; returns who got it."""
    winners, barrier = [], threading.Barrier(racers)

    def race(i: int) -> None:
        lease = Lease(Storage(str(root)), folder, f"racer {i}")
        barrier.wait()
        try:
            lease.acquire()
            winners.append(i)
        except LeaseHeld:
            pass

    threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return winners


def test_racing_actions_never_both_hold_it(tmp_path) -> None:
    for round_ in range(5):
        assert len(_race(tmp_path, f"race-{round_}", 8)) == 1


def test_the_holder_renews_while_it_works(tmp_path) -> None:
    lease = Lease(Storage(str(tmp_path)), "ckpt", "slow action", ttl=0.6)
    with lease.acquire():
        first = lease.current()[1].expires
        time.sleep(0.9)  # longer than the TTL: only renewal keeps it
        assert lease.current()[1].expires > first
        with pytest.raises(LeaseHeld):
            Lease(Storage(str(tmp_path)), "ckpt", "intruder", ttl=0.6).acquire()
    assert lease.current() is None


def _files(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}


def _gc(path: Path, *args: str) -> subprocess.CompletedProcess:
    quiet = ("--quiet-period", "0s", "--unsafe-short-quiet-period")
    return ckpt("gc", str(path), "--apply", "--grace", "0s", "--unsafe-short-grace", *quiet, *args)


def test_the_cli_refuses_while_another_deployment_holds_the_lease(copy_of) -> None:
    path = copy_of("two_actions")
    before = _files(path)
    other = lease_for(Storage(str(path)), "dagster run 4f2a (checkpoint_orphan_cleanup)").acquire()
    refused = _gc(path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert (
        "dagster run 4f2a (checkpoint_orphan_cleanup)" in refused.stderr
        and "maintenance lease" in refused.stderr
    )
    started = time.monotonic()
    assert _gc(path, "--wait", "2s").returncode == 2 and time.monotonic() - started >= 2
    assert _files(path) == before  # nothing planned against, nothing deleted
    other.release()
    done = _gc(path, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted"] and _files(path) < before
    assert lease_for(Storage(str(path)), "after").current() is None  # the CLI gave it back


def test_a_holder_killed_with_9_is_taken_over_after_expiry(copy_of) -> None:
    path = copy_of("two_actions")
    code = (
        "import os, signal\n"
        "from checkpoint.safety.lease import lease_for\n"
        "from checkpoint.storage import Storage\n"
        f"lease_for(Storage({str(path)!r}), 'ckpt gc --apply', ttl=4).acquire()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    died = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert died.returncode == -9
    held = _gc(path)
    assert held.returncode == 2 and "ckpt gc --apply" in held.stderr and "expires in" in held.stderr
    done = _gc(path, "--wait", "30s", "--json")
    assert done.returncode == 0, done.stderr
    lease = lease_for(Storage(str(path)), "reader")
    takeovers = [json.loads(x) for x in Path(lease.location + "-takeovers.jsonl").read_text().splitlines()]
    assert [t["expired_holder"]["owner"] for t in takeovers] == ["ckpt gc --apply"]
    assert takeovers[0]["expired_holder"]["pid"] != os.getpid()


def test_every_spelling_of_a_checkpoint_meets_at_one_lease(copy_of, tmp_path) -> None:
    """`/x/q`, `file:///x/q`, `/x//q/` and a relative `q` from `/x` (in another process, another
    working folder) are one checkpoint: whoever holds it, the others are refused."""
    path = copy_of("two_actions")
    spellings = [str(path), f"file://{path}", str(path).replace("/two_actions", "//two_actions") + "/"]
    holder = lease_for(Storage(spellings[0]), "ckpt compact").acquire()
    for spelling in spellings[1:]:
        with pytest.raises(LeaseHeld, match="ckpt compact"):
            lease_for(Storage(spelling), "another").acquire()
    relative = ckpt("gc", path.name, "--apply", "--grace", "0s", "--unsafe-short-grace", cwd=path.parent)
    assert relative.returncode == 2 and "ckpt compact" in relative.stderr
    holder.release()
    taken = lease_for(Storage(spellings[2]), "by another spelling").acquire()
    assert taken.location == holder.location
    taken.release()


def test_a_symlinked_spelling_waits_for_the_lease(copy_of, tmp_path) -> None:
    """The reproduction: `/x/real/q` and `/x/alias/q` (alias -> real) got two lease folders, and a
    `gc --apply` through the link ran during a compaction on the real path. One lease now, however
    the path reaches the checkpoint (a linked parent, a linked checkpoint folder, file://localhost)."""
    real = copy_of("two_actions")
    alias = tmp_path / "alias"
    alias.symlink_to(real.parent, target_is_directory=True)
    linked = tmp_path / "linked-q"
    linked.symlink_to(real, target_is_directory=True)
    before = _files(real)
    holder = lease_for(Storage(str(real)), "ckpt compact").acquire()
    for spelling in (alias / real.name, linked, f"file://localhost{real}"):
        with pytest.raises(LeaseHeld, match="ckpt compact"):
            lease_for(Storage(str(spelling)), "another").acquire()
    through_link = ckpt("gc", str(alias / real.name), "--apply", "--grace", "0s", "--unsafe-short-grace",
                        "--quiet-period", "0s", "--unsafe-short-quiet-period")  # fmt: skip
    assert through_link.returncode == 2 and "ckpt compact" in through_link.stderr
    assert _files(real) == before
    holder.release()


@pytest.fixture
def bind(tmp_path):
    """`mount --bind`, undone after the test: one folder under a second path (root, as CI runs)."""
    mounted: list[Path] = []

    def mount(folder: Path, at: Path) -> Path:
        at.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "--bind", str(folder), str(at)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"bind mounts need root and the mount syscall: {done.stderr.strip()}")
        mounted.append(at)
        return at

    yield mount
    for at in reversed(mounted):
        subprocess.run(["umount", str(at)], check=True)


def test_bind_mounts_of_a_checkpoint_or_its_folder_meet_one_lease(copy_of, tmp_path, bind) -> None:
    """The reproduction: through a second mount point of the same folder, `gc --apply` ran while
    another action held the lease through the first. The lease's identity is now the folder the
    storage finds (device and inode), whichever mount reaches it."""
    real = copy_of("two_actions")
    via_parent = bind(real.parent, tmp_path / "mnt" / "share") / real.name  # a share mounted twice
    via_itself = bind(real, tmp_path / "mnt" / "ckpt")  # the checkpoint folder bound elsewhere
    assert os.path.samestat(os.stat(via_parent), os.stat(real)) and str(via_parent) != str(real)
    before = _files(real)
    holder = lease_for(Storage(str(real)), "ckpt compact").acquire()
    for spelling in (via_parent, via_itself):
        with pytest.raises(LeaseHeld, match="ckpt compact"):
            lease_for(Storage(str(spelling)), "another").acquire()
        gc = [
            str(spelling),
            "--apply",
            "--grace",
            "0s",
            "--unsafe-short-grace",
            "--quiet-period",
            "0s",
            "--unsafe-short-quiet-period",
        ]
        refused = ckpt("gc", *gc)
        assert refused.returncode == 2 and "ckpt compact" in refused.stderr, refused.stderr
    assert _files(real) == before
    holder.release()
    other = lease_for(Storage(str(via_itself)), "through the mount").acquire()
    assert other.location == lease_for(Storage(str(real)), "x").location
    other.release()


HAMMER = r"""
import json, random, sys, time
from checkpoint.safety.lease import Lease
from checkpoint.errors import LeaseHeld, LeaseLost
from checkpoint.storage import Storage

root, log, until, me = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
rng = random.Random(me)
while time.time() < until:
    lease = Lease(Storage(root), "ckpt", me, ttl=0.8)
    try:
        lease.acquire(wait=0.3, poll=0.01)
    except LeaseHeld:
        continue
    start = last = time.time()  # held from here: every earlier holder's expiry has passed
    try:
        for _ in range(rng.randint(1, 6)):
            time.sleep(1.2 if rng.random() < 0.05 else 0.03)  # now and then a holder stalls past its TTL
            # What a passing check proves: the lease was held when it began. The time is taken
            # before it, since the process may stall after it returns: a lease promises nothing
            # about the moment after a check (the action's change must fit in the margin).
            checked = time.time()
            lease.check()
            last = checked
            lease.renew()
    except LeaseLost:
        pass
    with open(log, "a") as f:
        f.write(json.dumps([me, start, last]) + "\n")
    if rng.random() < 0.9:
        lease.release()  # else: dies holding it, as a kill -9 would, and is taken over after expiry
"""


@pytest.mark.stress
def test_eight_processes_hammering_one_lease_never_overlap(tmp_path) -> None:
    seconds = float(os.environ.get("CKPT_LEASE_HAMMER_SECONDS", "30"))
    log = tmp_path / "held.jsonl"
    until = time.time() + seconds
    args = [str(tmp_path / "audit"), str(log), str(until)]
    procs = [subprocess.Popen([sys.executable, "-c", HAMMER, *args, f"p{i}"]) for i in range(8)]
    for p in procs:
        assert p.wait(timeout=seconds + 120) == 0
    held = sorted(json.loads(line) for line in log.read_text().splitlines())
    held.sort(key=lambda h: h[1])
    assert len(held) >= seconds / 3 and len({h[0] for h in held}) >= 3  # the lease changed hands often
    for (who, _, last), (next_who, next_start, _) in itertools.pairwise(held):
        assert last < next_start, f"{who} still held it at {last} when {next_who} took it at {next_start}"
    takeovers = (tmp_path / "audit" / "ckpt" / "lease-takeovers.jsonl").read_text().splitlines()
    assert takeovers  # holders that stalled or died were taken over, and none of them overlapped


def test_a_lease_of_no_time_or_one_that_cannot_be_read_is_said_in_one_line(copy_of, tmp_path) -> None:
    """The review: `--lease-ttl 0` was lost at once and left a generation that locked the next
    action out for ten minutes; a lease generation made a 2 GiB sparse file locked the checkpoint
    for good without saying how to free it."""
    import os

    from checkpoint.safety import lease_for
    from tests.support.cli import ckpt

    path = copy_of("snapshots")
    out = ckpt("gc", str(path), "--apply", "--query-stopped", "--lease-ttl", "0s")
    assert out.returncode == 2 and "the lease's time to live is 0.0" in out.stderr, out.stderr
    with lease_for(Storage(str(path)), "a test").acquire():
        pass
    generation = sorted((path.parent / "_ckpt_audit").rglob("lease/*.json"))[-1]  # the newest, read first
    os.truncate(generation, 2 << 30)
    out = ckpt("gc", str(path), "--apply", "--query-stopped")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "unreadable maintenance lease" in out.stderr and f"delete {generation}" in out.stderr
