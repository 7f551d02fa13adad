"""Worker processes for a cleanup plan start only where the files repay their start: a spawned
worker imports this package first (a second of CPU), and a plan of a few thousand files takes a
twentieth of that in one process. The first partition, decided in this process, tells."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from checkpoint.cleanup import plan as gc_plan
from checkpoint.cleanup import pool as planning_pool
from checkpoint.policy import POLICY
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed import synthetic

PARTITIONS, VERSIONS = 16, 20  # 2,314 files: as many partitions as start workers, few files


@pytest.fixture
def started(monkeypatch) -> list[int]:
    """The worker pools each plan started, by their size."""
    pools: list[int] = []
    real = planning_pool.ProcessPoolExecutor

    def recording(workers: int, **kwargs):
        pools.append(workers)
        return real(workers, **kwargs)

    monkeypatch.setattr(planning_pool, "ProcessPoolExecutor", recording)
    return pools


def _manifest(plan) -> list[bytes]:
    head, *lines = Path(plan.manifest.removeprefix("file://")).read_bytes().splitlines()
    return [head.replace(plan.plan_id.encode(), b"<id>"), *lines]


def _plan(path: Path, audit: Path, now: float, **kwargs):
    return gc_plan.plan_gc(Storage(str(path)), AuditTrail(str(audit)), now=now, query_stopped=True, **kwargs)


def test_a_plan_of_few_files_starts_no_worker_however_many_partitions(started, monkeypatch, tmp_path) -> None:
    path = tmp_path / "q"
    files = synthetic.write_local(path, synthetic.iter_files(PARTITIONS, VERSIONS))
    assert files < POLICY.plan_processes_from_files
    assert planning_pool.planning_workers(Storage(str(path)), PARTITIONS) > 0  # enough partitions
    now = time.time() + 10**7
    here = _plan(path, tmp_path / "here", now)
    assert started == [] and here.files > 0
    # The same checkpoint under a policy whose floor its files pass: the rest of it in workers,
    # the same manifest, and the first partition not decided twice.
    lower = dataclasses.replace(POLICY, plan_processes_from_files=files // 2)
    monkeypatch.setattr(planning_pool, "POLICY", lower)
    there = _plan(path, tmp_path / "there", now)
    assert len(started) == 1 and started[0] > 0
    assert _manifest(there) == _manifest(here) and there.files == here.files
    # A caller's own count is started as given, whatever the files.
    monkeypatch.setattr(planning_pool, "POLICY", POLICY)
    given = _plan(path, tmp_path / "given", now, workers=2)
    assert started[1:] == [2] and _manifest(given) == _manifest(here)
