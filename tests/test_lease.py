"""The maintenance lease: one writing action per checkpoint, across processes and deployments.

Scenarios run against a manual clock where time matters; the CLI and a process killed with -9 run
for real on a copy of a corpus checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from checkpoint.gc_apply import AuditTrail
from checkpoint.lease import Lease, LeaseHeld, LeaseLost
from checkpoint.storage import Storage

CKPT = shutil.which("ckpt", path=str(Path(sys.executable).parent)) or "ckpt"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _lease(root: Path, owner: str, clock: Clock, ttl: float = 60) -> Lease:
    return Lease(Storage(str(root)), "ckpt-0001", owner, ttl=ttl, clock=clock, sleep=clock.sleep)


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
    b.acquire()
    assert b.generation == a.generation + 1 and b.took_over.owner == "ckpt gc --apply"
    takeovers = (tmp_path / "ckpt-0001" / "lease-takeovers.jsonl").read_text().splitlines()
    assert [json.loads(t)["expired_holder"]["owner"] for t in takeovers] == ["ckpt gc --apply"]
    with pytest.raises(LeaseLost, match="taken after this lease expired"):
        a.check()  # the old holder learns it before its next change
    a.release()  # gives back nothing that is not its own
    assert b.current()[1].owner == "dagster run r1 (cleanup)"
    b.release()
    assert b.current() is None
    _lease(tmp_path, "next", clock).acquire()  # free again


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
    cmd = [CKPT, "gc", str(path), "--apply", "--grace", "0s", "--unsafe-short-grace", "--quiet-period", "0s"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)


def test_the_cli_refuses_while_another_deployment_holds_the_lease(copy_of) -> None:
    path = copy_of("two_actions")
    before = _files(path)
    audit = AuditTrail(AuditTrail.default_for(str(path)))
    other = audit.lease(str(path), "dagster run 4f2a (checkpoint_orphan_cleanup)").acquire()
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
    assert audit.lease(str(path), "after").current() is None  # the CLI gave it back


def test_a_holder_killed_with_9_is_taken_over_after_expiry(copy_of) -> None:
    path = copy_of("two_actions")
    audit_url = AuditTrail.default_for(str(path))
    code = (
        "import os, signal\n"
        "from checkpoint.gc_apply import AuditTrail\n"
        f"AuditTrail({audit_url!r}).lease({str(path)!r}, 'ckpt gc --apply', ttl=4).acquire()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    died = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert died.returncode == -9
    held = _gc(path)
    assert held.returncode == 2 and "ckpt gc --apply" in held.stderr and "expires in" in held.stderr
    done = _gc(path, "--wait", "30s", "--json")
    assert done.returncode == 0, done.stderr
    audit = AuditTrail(audit_url)
    takeovers = [json.loads(x) for x in Path(audit_url, audit._folder_of(str(path)), "lease-takeovers.jsonl")
                 .read_text().splitlines()]  # fmt: skip
    assert [t["expired_holder"]["owner"] for t in takeovers] == ["ckpt gc --apply"]
    assert takeovers[0]["expired_holder"]["pid"] != os.getpid()
