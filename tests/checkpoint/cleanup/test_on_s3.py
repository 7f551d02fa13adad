"""A cleanup on S3: the local plan's deletions, planned in worker processes alike, their failures
retried key by key or reported, and an audit trail that names objects that exist."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import pytest

from checkpoint.cleanup import plan as gc_plan
from checkpoint.cleanup import pool as planning_pool
from checkpoint.errors import CheckpointError
from checkpoint.format.layout import FileKind
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint, hadoop_checksum
from tests.support.planning import LATER, apply_unleased, candidates_of, manifest_lines, plan_of
from tests.support.s3 import direct, planned_on, via_proxy


def test_cleanup_on_s3_deletes_what_the_local_plan_names(s3, s3_copy_of, corpus, tmp_path) -> None:
    """What the apply's re-check and its deletions cost, request by request. That what it keeps is
    what recovery reads is the grid's, in every format on S3 (`tests/checkpoint/test_grid.py`);
    restarts after a cleanup are in `test_gc.py` and `test_default_formats.py` here."""
    _, proxy, _ = s3
    # With Hadoop's hidden checksums, as a copy made by a sync tool has them (stale ones among
    # them): the one test here where an object store holds any, and they go as on a local disk.
    url = s3_copy_of("two_actions", hadoop_checksums=True)
    options = via_proxy(s3)
    audit = AuditTrail(str(tmp_path / "audit"))
    remote = plan_of(Storage(url, options), audit, now=time.time() + LATER)
    planned = candidates_of(remote)
    local_copy = tmp_path / "local"
    copy_checkpoint(corpus["two_actions"], local_copy)
    local = plan_of(local_copy, now=time.time() + LATER)
    assert {c.path for c in planned} == {c.path for c in candidates_of(local)}
    assert [c for c in planned if hadoop_checksum(c.path)] and [
        c for c in planned if not hadoop_checksum(c.path)
    ]
    # What the apply's re-check of every line costs, measured alone: the logs as a plan lists
    # them, and one listing of each partition its lines name.
    proxy.reset()
    recheck = gc_plan.Recheck(remote, Storage(url, options))
    for c in planned:
        recheck.check(c)
    rechecked = proxy.counts()["ListObjectsV2"]
    partitions = len({"/".join(c.path.split("/")[:3]) for c in planned})
    assert proxy.counts()["HeadObject"] == 0 and rechecked >= partitions
    proxy.reset()
    result = apply_unleased(remote, Storage(url, options), audit, batch_size=50)
    deleted = {o["path"] for o in audit.outcomes(remote) if o["outcome"] == "deleted"}  # every one
    assert deleted == {c.path for c in planned} and result.deleted.files == len(planned)
    assert not result.failed.files
    counts = proxy.counts()
    assert counts["DeleteObjects"] == math.ceil(len(planned) / 50)
    # The check lists commits/ and offsets/; each delete batch re-stats its candidates with one
    # listing of each partition it touches (a few hundred files each: cheaper than a HEAD apiece).
    touched = sum(
        len({"/".join(c.path.split("/")[:3]) for c in planned[i : i + 50]})
        for i in range(0, len(planned), 50)
    )
    assert counts["HeadObject"] == 0 and counts["ListObjectsV2"] == 2 + touched + rechecked
    left = {p.split("/two_actions/", 1)[1] for p in direct(s3).find(url[len("s3://") :])}
    assert not left & {c.path for c in planned}
    again = plan_of(Storage(url, options), now=time.time() + LATER)
    assert again.files == 0


def test_planning_in_worker_processes_on_s3_is_the_plan_made_here(
    s3, s3_copy_of, loaded, tmp_path, monkeypatch
) -> None:
    """On S3 a plan of many partitions decides them in spawned worker processes (a fork would not
    carry s3fs's event loop), each with a client of its own and several partitions at once: its
    manifest and every request it sends are those of a plan made in this process. A lineage
    header found damaged in a worker fails the plan with the error a plan made here gives."""
    _, proxy, bucket = s3
    url, options, now = s3_copy_of("two_actions"), via_proxy(s3), time.time() + LATER
    started: list[tuple[str, int]] = []
    pool = planning_pool.ProcessPoolExecutor

    def recording(workers: int, **kwargs):
        started.append((kwargs["mp_context"].get_start_method(), workers))
        return pool(workers, **kwargs)

    monkeypatch.setattr(planning_pool, "ProcessPoolExecutor", recording)
    # Its 4 partitions two at a time in each process: both processes, and threads in each, take part.
    monkeypatch.setattr(planning_pool, "partitions_at_once", lambda storage, processes: 2 if processes else 8)

    def planned(workers: int) -> tuple[list[bytes], dict[str, int], dict[str, int]]:
        proxy.reset()
        storage, audit = Storage(url, options), AuditTrail(str(tmp_path / f"{workers}"))
        plan = plan_of(storage, audit, now=now, workers=workers)
        lines = manifest_lines(plan.manifest, plan.plan_id)
        return lines, dict(proxy.counts()), dict(storage.calls.snapshot())  # what workers did counts

    here, there = planned(0), planned(2)
    assert started == [("spawn", 2)]
    assert len(here[0]) > 1 and here == there
    # A committed changelog whose header the plan must read: one with no zip of its own, of the last
    # partition that has one (Spark's maintenance zips a version when its timing allows, so a corpus
    # written anew on a cold cache may hold a zip of the newest version of any partition).
    local = loaded["two_actions"]
    batch = local.latest_committed_batch

    def newest(sid, kind: FileKind):
        return local.stores[sid].file(kind, batch + 1, local.committed_unique_id(batch, sid))

    in_order = sorted(local.stores, key=lambda sid: (sid.operator, sid.partition))
    unzipped = [sid for sid in in_order if newest(sid, FileKind.ZIP) is None]
    assert unzipped, "every partition of the corpus zipped its newest version: no header for the plan to read"
    changelog = newest(unzipped[-1], FileKind.CHANGELOG)
    direct(s3).pipe(f"{url.removeprefix('s3://')}/{changelog.rel}", b"not an lz4 stream")
    errors = []
    for workers in (0, 2):
        with pytest.raises(CheckpointError) as failed:
            planned(workers)
        errors.append((type(failed.value), str(failed.value)))
    assert errors[0] == errors[1] and changelog.rel in errors[0][1]
    assert started == [("spawn", 2)] * 2


def _three_keys_failing(s3, s3_copy_of, audit: AuditTrail, times: int):
    """A plan of a fresh copy, and the proxy set to fail its first three candidates' deletion
    `times` times each: (the plan, the storage, those three paths, the keys under the bucket)."""
    _, proxy, bucket = s3
    url, options = s3_copy_of("two_actions"), via_proxy(s3)
    plan, planned = planned_on(url, options, audit)
    prefix = url[len(f"s3://{bucket}/") :]
    paths = {c.path for c in planned[:3]}
    proxy.reset()
    proxy.faults.fail_delete_keys = {f"{prefix}/{p}" for p in paths}
    proxy.faults.fail_delete_times = times
    return plan, Storage(url, options), paths, {f"{bucket}/{prefix}/{p}" for p in paths}


def test_partial_delete_failures_are_retried_key_by_key(s3, s3_copy_of, tmp_path) -> None:
    audit = AuditTrail(str(tmp_path))
    plan, storage, _, flaky = _three_keys_failing(s3, s3_copy_of, audit, times=1)
    sleeps: list[float] = []
    result = apply_unleased(plan, storage, audit, sleep=sleeps.append)
    assert result.deleted.files == plan.files and not result.failed.files
    assert s3[1].counts()["DeleteObjects"] == 2 and len(sleeps) == 1
    assert not any(direct(s3).exists(k) for k in flaky)


def test_keys_that_keep_failing_are_reported_and_never_called_deleted(s3, s3_copy_of, tmp_path) -> None:
    audit = AuditTrail(str(tmp_path))
    plan, storage, stuck, keys = _three_keys_failing(s3, s3_copy_of, audit, times=100)
    result = apply_unleased(plan, storage, audit, attempts=3, sleep=lambda s: None)
    assert {o.path for o in result.failed.sample} == stuck and result.failed.files == 3
    assert all(o.why.startswith("InternalError") for o in result.failed.sample)
    assert not stuck & {o.path for o in result.deleted.sample}
    assert result.deleted.files == plan.files - 3
    assert all(direct(s3).exists(k) for k in keys)
    recorded = [json.loads(line) for line in Path(audit.outcomes_url(plan)).read_text().splitlines()]
    assert {r["path"] for r in recorded if r["outcome"] == "failed"} == stuck
    assert s3[1].counts()["DeleteObjects"] == 3


def test_the_audit_trail_on_s3_names_objects_that_exist(s3, s3_copy_of) -> None:
    server, proxy, bucket = s3
    url, options = s3_copy_of("two_actions"), via_proxy(s3)
    audit = AuditTrail(f"s3://{bucket}/audit-{url.rsplit('/', 2)[-2]}", options)
    plan, planned = planned_on(url, options, audit)
    first = apply_unleased(plan, Storage(url, options), audit)
    again = apply_unleased(plan, Storage(url, options), audit)  # idempotent: everything already gone
    assert first.deleted.files == plan.files and not again.deleted.files
    server = direct(s3)
    assert audit.read_plan(plan.manifest) == dataclasses.replace(plan, digest="")
    assert server.exists(plan.manifest[len("s3://") :])
    recorded = [
        json.loads(line) for line in server.cat(audit.outcomes_url(plan)[len("s3://") :]).splitlines()
    ]
    assert [r["outcome"] for r in recorded] == ["deleted"] * plan.files + ["skipped"] * plan.files
    assert recorded == audit.outcomes(plan)
