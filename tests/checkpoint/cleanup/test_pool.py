"""Worker processes for a cleanup plan start only where the files repay their start. A process that
runs other threads (a Dagster run, this test's worker) must spawn them, and a spawned worker imports
this package first (a second of CPU), where a plan of a few thousand files takes a twentieth of
that in one process: there, on a local disk, the plan decides partitions itself until those left
hold `plan_processes_from_files` at the mean of those decided."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from checkpoint.cleanup import pool as planning_pool
from checkpoint.policy import POLICY
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed import synthetic
from tests.support.planning import manifest_lines, plan_of, planned_in_a_fresh_process

PARTITIONS, VERSIONS = 16, 20  # 2,314 files: as many partitions as start workers, few files


@pytest.fixture
def started(monkeypatch) -> list[int]:
    """The worker pools each plan started, by their size; this process runs another thread, and
    has two cores (the most a plan starts is one a core)."""
    pools: list[int] = []
    real = planning_pool.ProcessPoolExecutor

    def recording(workers: int, **kwargs):
        pools.append(workers)
        return real(workers, **kwargs)

    monkeypatch.setattr(planning_pool, "ProcessPoolExecutor", recording)
    monkeypatch.setattr(planning_pool.os, "cpu_count", lambda: 2)
    done = threading.Event()
    threading.Thread(target=done.wait, daemon=True).start()
    yield pools
    done.set()


def _manifest(plan) -> list[bytes]:
    return manifest_lines(plan.manifest, plan.plan_id)


def _plan(path: Path, audit: Path, now: float, **kwargs):
    return plan_of(Storage(str(path)), AuditTrail(str(audit)), now=now, **kwargs)


@pytest.mark.parametrize("live", [False, True], ids=["stopped", "live"])
def test_a_plan_starts_its_spawned_workers_only_where_the_files_repay_them(
    started, monkeypatch, tmp_path, live: bool
) -> None:
    """Live: its logs fresh, so the SSTs are decided last, against the whole plan's floor."""
    path = tmp_path / "q"
    files = synthetic.write_local(path, synthetic.iter_files(PARTITIONS, VERSIONS))
    now = time.time() + (0 if live else 10**7)
    if live:
        for log in [*path.glob("commits/*"), *path.glob("offsets/*")]:
            os.utime(log, (now - 60, now - 60))
    assert files < POLICY.plan_processes_from_files
    assert planning_pool.planning_workers(Storage(str(path)), PARTITIONS) == 2  # enough partitions
    alone = _plan(path, tmp_path / "alone", now, workers=0, query_stopped=not live)
    assert alone.live is live and alone.files > 0
    here = _plan(path, tmp_path / "here", now, query_stopped=not live)
    assert started == [] and _manifest(here) == _manifest(alone)
    # Under a floor its files pass after a few partitions: the rest in workers, the same manifest
    # (every partition once, in order, the held SSTs last).
    monkeypatch.setattr(
        planning_pool, "POLICY", dataclasses.replace(POLICY, plan_processes_from_files=files // 2)
    )
    there = _plan(path, tmp_path / "there", now, query_stopped=not live)
    assert started == [2] and _manifest(there) == _manifest(alone)
    # A caller's own count is started as given, whatever the files.
    monkeypatch.setattr(planning_pool, "POLICY", POLICY)
    given = _plan(path, tmp_path / "given", now, workers=2, query_stopped=not live)
    assert started == [2, 2] and _manifest(given) == _manifest(alone)


def test_a_process_without_other_threads_forks_its_workers_at_once(tmp_path) -> None:
    """A forked worker starts in milliseconds, with the plan in its memory: no partition is decided
    first to find out whether it pays."""
    path = tmp_path / "q"
    synthetic.write_local(path, synthetic.iter_files(PARTITIONS, VERSIONS))
    out = planned_in_a_fresh_process(
        path, tmp_path / "audit", time.time() + 10**7, with_thread=False, workers=None
    )
    assert out["started"] == ["fork"]
