"""Every operation on s3:// against a real S3 server on loopback: same results, few requests, real faults.

The checkpoints are the corpus's, uploaded; the server is SeaweedFS; every request passes a proxy
that counts it (request economy) and injects the failures S3 really produces.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import s3fs

from checkpoint.cleanup import plan as gc_plan
from checkpoint.cleanup import pool as planning_pool
from checkpoint.cleanup.apply import apply_plan
from checkpoint.cleanup.audit import AuditTrail
from checkpoint.errors import CheckpointError, StorageError
from checkpoint.format.layout import FileKind
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.head import load_head
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint, upload_checkpoint
from tests.support.cli import CKPT, ckpt
from tests.support.planning import candidates_of, plan_of
from tests.support.runs import checkpoints_of

LATER = 7 * 3600  # planning "seven hours from now": the just-uploaded objects are past the grace period


def _cli(proxy, *args: str) -> subprocess.CompletedProcess:
    # Only the standard environment: credentials and region come from the session fixture's AWS_*.
    env = {**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint}
    return subprocess.run([CKPT, *args], capture_output=True, text=True, timeout=300, env=env)


def _direct(s3) -> s3fs.S3FileSystem:
    return s3[0].filesystem()


def _via_proxy(s3) -> dict:
    server, proxy, _ = s3
    return server.storage_options(proxy.endpoint)


def _root_options(s3) -> dict:
    """A Dagster root's options: where the server is, never who we are. The credentials come from
    the environment (botocore's chain), as a deployment's must: a root refuses them."""
    return {k: v for k, v in _via_proxy(s3).items() if k not in ("key", "secret")}


def _same(remote: dict, url: str, local: dict, path: str) -> bool:
    # Findings name fsspec paths, which drop the scheme; the documents name the checkpoint's URL.
    text = json.dumps(remote, sort_keys=True).replace(url, "<ckpt>").replace(url[len("s3://") :], "<ckpt>")
    return text == json.dumps(local, sort_keys=True).replace(path, "<ckpt>")


@pytest.mark.parametrize("name", ["long_chain", "join_cf", "snapshots", "killed_after_restart"])
def test_read_only_commands_give_the_local_answers(s3, s3_copy_of, corpus, name) -> None:
    _, proxy, _ = s3
    url = s3_copy_of(name)
    for command in (["inspect"], ["lineage"], ["validate", "--deep"]):
        remote = _cli(proxy, *command, url, "--json")
        local = _cli(proxy, *command, str(corpus[name]), "--json")
        assert remote.returncode == local.returncode, (command, remote.stderr)
        remote_doc, local_doc = json.loads(remote.stdout), json.loads(local.stdout)
        if command == ["inspect"]:  # the same files and bytes; only mtimes differ after an upload
            moved = _renamed_bytes(corpus[name], url)  # operator metadata v2 names the S3 copy's place
            assert (
                remote_doc["bytes"] == local_doc["bytes"] + moved
                and remote_doc["files"] == local_doc["files"]
            )
        assert _same(remote_doc, url, local_doc, str(corpus[name])) or command == ["inspect"], command


def _renamed_bytes(local: Path, url: str) -> int:
    from checkpoint.fork.plan import rewrite_schema_paths

    metas = local.glob("state/*/_metadata/v2/[!.]*")
    here = "s3a://" + url[len("s3://") :]
    return sum(len(rewrite_schema_paths(m.read_bytes(), here, str(m))) - m.stat().st_size for m in metas)


# What a head-first load may list inside a checkpoint: its root, the logs, `state/` (operators) and
# each operator (its partition folders, checked against what the logs declare) and its metadata
# folders. Never inside a partition folder, never recursively.
_HEAD_LISTINGS = re.compile(r"^(|commits/|offsets/|state/|state/\d+/|state/\d+/_metadata/(v2/)?)$")


def test_scan_lists_folders_and_reads_what_recovery_reads(s3, s3_copy_of, corpus) -> None:
    _, proxy, bucket = s3
    names = ["long_chain", "join", "snapshots", "two_actions", "list_state"]
    urls = [s3_copy_of(name, prefix="economy") for name in names]
    proxy.reset()
    out = _cli(proxy, "scan", f"s3://{bucket}/economy", "--json")
    assert out.returncode in (0, 1), out.stderr
    doc = json.loads(out.stdout)
    assert sorted(c["path"].rsplit("/", 1)[-1] for c in doc["checkpoints"]) == sorted(names)
    inside = [r for r in proxy.requests if r.op.startswith("List") and r.target.count("/") > 2]
    for r in inside:
        ckpt = next(u[len("s3://") :] + "/" for u in urls if r.target.startswith(u[len("s3://") :] + "/"))
        assert _HEAD_LISTINGS.match(r.target[len(ckpt) :]), r.target
    gets = [r for r in proxy.requests if r.op == "GetObject"]
    assert not [r for r in gets if r.path.endswith(".sst")]  # SSTs are only stat'ed
    header_reads = [r for r in gets if r.path.endswith(".changelog")]
    assert header_reads and all(r.ranged for r in header_reads)
    assert len(gets) == len({r.path for r in gets})  # no object read twice
    heads = [r.path for r in proxy.requests if r.op == "HeadObject"]
    assert len(heads) == len(set(heads))  # nor checked twice (a header read once cost a HEAD first)


def test_a_listing_is_not_kept_and_a_listed_file_is_read_by_one_get(s3, s3_copy_of) -> None:
    """s3fs keeps every entry a recursive listing sees in a cache that nothing here reads: a plan
    listing partition after partition would hold the whole checkpoint by its end. A read of a file
    whose size is known is one GET, with no HEAD first, cache or not."""
    _, proxy, _ = s3
    storage = Storage(s3_copy_of("long_chain"), _via_proxy(s3))
    files = storage.list_files("state/0/0")
    assert files and not [k for k in storage.fs.dircache if k.startswith(storage.root)]
    changelog = next(f for f in files if f.rel.endswith(".changelog") and f.size > 0)
    proxy.reset()
    with storage.open(changelog.rel, block_size=128 * 1024, size=changelog.size) as fh:
        assert fh.read(4)
    assert proxy.counts() == {"GetObject": 1}


def test_discovery_sends_no_request_inside_a_checkpoint(s3, s3_copy_of) -> None:
    from checkpoint.model.discovery import find_checkpoints

    _, proxy, bucket = s3
    urls = [s3_copy_of(name, prefix=f"fleet/{team}") for team, name in (("a", "snapshots"), ("b", "join"))]
    proxy.reset()
    found = find_checkpoints(Storage(f"s3://{bucket}/fleet", _via_proxy(s3)))
    assert sorted(f.url for f in found) == sorted(urls)
    keys = [u[len("s3://") :] for u in urls]
    # Each checkpoint's own folder is listed once (to know it is one); nothing below it.
    targets = [r.target for r in proxy.requests]
    assert not [t for t in targets if any(t.startswith(k + "/") and t != k + "/" for k in keys)]
    assert sorted(t for t in targets if t.rstrip("/") in keys) == sorted(k + "/" for k in keys)
    assert set(proxy.counts()) == {"ListObjectsV2"}


@pytest.fixture(scope="module")
def s3_histories(s3) -> dict[str, str]:
    """Two synthetic checkpoints on S3 that differ only in older history (testbed/synthetic)."""
    from testbed import synthetic

    server, _, bucket = s3
    fs = server.filesystem()
    urls = {}
    for name, versions in (("small", 35), ("big", 155)):
        content = synthetic.files(4, versions, window=20)
        fs.pipe({f"{bucket}/histories/{name}/{rel}": data for rel, data in content.items()})
        urls[name] = f"s3://{bucket}/histories/{name}"
    return urls


@pytest.mark.parametrize("command", [["lineage"], ["validate"], ["validate", "--deep"]])
def test_requests_do_not_grow_with_history(s3, s3_histories, command) -> None:
    _, proxy, _ = s3
    counts = {}
    for name, url in s3_histories.items():
        proxy.reset()
        out = _cli(proxy, *command, url, "--json")
        assert out.returncode in (0, 1), out.stderr
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["GetObject"] > 0, counts


def test_an_idle_commit_sensor_tick_is_one_listing_per_checkpoint(s3, s3_histories) -> None:
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration.due import SensorState
    from orchestration.sensors import checkpoint_commit_sensor

    _, proxy, bucket = s3
    roots = CheckpointRootsResource(
        roots=[CheckpointRoot(name="s3", url=f"s3://{bucket}/histories", storage_options=_root_options(s3))]
    )
    keys = [partition_key("s3", name) for name in s3_histories]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", keys + ["s3:gone"])

        def tick(cursor):
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            return ctx, checkpoint_commit_sensor(ctx)

        _, first = tick(json.dumps({"s3:removed-since": 3}))
        assert isinstance(first, dg.SensorResult)
        assert sorted(k for r in first.run_requests for k in checkpoints_of(r)) == sorted(keys)
        assert set(SensorState.from_json(first.cursor).seen) == set(keys)  # the removed one left
        proxy.reset()
        _, idle = tick(first.cursor)
        assert isinstance(idle, dg.SkipReason)
        # One LIST per checkpoint (the missing one's listing is empty): nothing else at all.
        assert proxy.counts() == {"ListObjectsV2": len(keys) + 1}
        assert sorted(r.target for r in proxy.requests) == sorted(
            f"{bucket}/histories/{name}/commits/" for name in [*s3_histories, "gone"]
        )


@pytest.mark.slow
def test_cleanup_on_s3_deletes_what_the_local_plan_names(
    s3, s3_copy_of, spark, corpus, corpus_root, tmp_path
) -> None:
    _, proxy, _ = s3
    url = s3_copy_of("two_actions")
    options = _via_proxy(s3)
    audit = AuditTrail(str(tmp_path / "audit"))
    remote = plan_of(Storage(url, options), audit, now=time.time() + LATER)
    planned = candidates_of(remote)
    local_copy = tmp_path / "local"
    copy_checkpoint(corpus["two_actions"], local_copy)
    local = plan_of(local_copy, now=time.time() + LATER)
    assert {c.path for c in planned} == {c.path for c in candidates_of(local)} != set()
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
    result = apply_plan(remote, Storage(url, options), audit, batch_size=50)
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
    left = {p.split("/two_actions/", 1)[1] for p in _direct(s3).find(url[len("s3://") :])}
    assert not left & {c.path for c in planned}
    again = plan_of(Storage(url, options), now=time.time() + LATER)
    assert again.files == 0
    _restarts_like_untouched(s3, spark, corpus, corpus_root, url, tmp_path)


def test_planning_in_worker_processes_on_s3_is_the_plan_made_here(
    s3, s3_copy_of, loaded, tmp_path, monkeypatch
) -> None:
    """On S3 a plan of many partitions decides them in spawned worker processes (a fork would not
    carry s3fs's event loop), each with a client of its own and several partitions at once: its
    manifest and every request it sends are those of a plan made in this process. A lineage
    header found damaged in a worker fails the plan with the error a plan made here gives."""
    _, proxy, bucket = s3
    url, options, now = s3_copy_of("two_actions"), _via_proxy(s3), time.time() + LATER
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
        head, *lines = Path(plan.manifest.removeprefix("file://")).read_bytes().splitlines()
        manifest = [head.replace(plan.plan_id.encode(), b"<id>"), *lines]
        return manifest, dict(proxy.counts()), dict(storage.calls.snapshot())  # what workers did counts

    here, there = planned(0), planned(2)
    assert started == [("spawn", 2)]
    assert len(here[0]) > 1 and here == there
    # A committed changelog of the last partition whose header the plan must read: no zip of its own.
    local = loaded["two_actions"]
    last = max(local.stores, key=lambda sid: (sid.operator, sid.partition))
    batch = local.latest_committed_batch
    uid = local.committed_unique_id(batch, last)
    assert local.stores[last].file(FileKind.ZIP, batch + 1, uid) is None
    changelog = local.stores[last].file(FileKind.CHANGELOG, batch + 1, uid)
    _direct(s3).pipe(f"{url.removeprefix('s3://')}/{changelog.rel}", b"not an lz4 stream")
    errors = []
    for workers in (0, 2):
        with pytest.raises(CheckpointError) as failed:
            planned(workers)
        errors.append((type(failed.value), str(failed.value)))
    assert errors[0] == errors[1] and changelog.rel in errors[0][1]
    assert started == [("spawn", 2)] * 2


def _plan(url: str, options: dict, audit: AuditTrail):
    plan = plan_of(Storage(url, options), audit, now=time.time() + LATER)
    assert plan.files >= 4
    return plan, candidates_of(plan, audit)


def test_partial_delete_failures_are_retried_key_by_key(s3, s3_copy_of, tmp_path) -> None:
    _, proxy, bucket = s3
    url, options = s3_copy_of("two_actions"), _via_proxy(s3)
    audit = AuditTrail(str(tmp_path))
    plan, planned = _plan(url, options, audit)
    prefix = url[len(f"s3://{bucket}/") :]
    flaky = {f"{prefix}/{c.path}" for c in planned[:3]}
    proxy.reset()
    proxy.faults.fail_delete_keys, proxy.faults.fail_delete_times = flaky, 1
    sleeps: list[float] = []
    result = apply_plan(plan, Storage(url, options), audit, sleep=sleeps.append)
    assert result.deleted.files == plan.files and not result.failed.files
    assert proxy.counts()["DeleteObjects"] == 2 and len(sleeps) == 1
    assert not any(_direct(s3).exists(f"{bucket}/{k}") for k in flaky)


def test_keys_that_keep_failing_are_reported_and_never_called_deleted(s3, s3_copy_of, tmp_path) -> None:
    _, proxy, bucket = s3
    url, options = s3_copy_of("two_actions"), _via_proxy(s3)
    audit = AuditTrail(str(tmp_path))
    plan, planned = _plan(url, options, audit)
    prefix = url[len(f"s3://{bucket}/") :]
    stuck = {c.path for c in planned[:3]}
    proxy.reset()
    proxy.faults.fail_delete_keys = {f"{prefix}/{p}" for p in stuck}
    proxy.faults.fail_delete_times = 100
    result = apply_plan(plan, Storage(url, options), audit, attempts=3, sleep=lambda s: None)
    assert {o.path for o in result.failed.sample} == stuck and result.failed.files == 3
    assert all(o.why.startswith("InternalError") for o in result.failed.sample)
    assert not stuck & {o.path for o in result.deleted.sample}
    assert result.deleted.files == plan.files - 3
    assert all(_direct(s3).exists(f"{bucket}/{prefix}/{p}") for p in stuck)
    recorded = [json.loads(line) for line in Path(audit.outcomes_url(plan)).read_text().splitlines()]
    assert {r["path"] for r in recorded if r["outcome"] == "failed"} == stuck
    assert proxy.counts()["DeleteObjects"] == 3


def _with_attempts(s3, attempts: int) -> dict:
    return {
        **_via_proxy(s3),
        "config_kwargs": {"retries": {"mode": "adaptive", "total_max_attempts": attempts}},
    }


def test_throttling_is_retried_once_by_one_policy(s3, s3_copy_of, tmp_path) -> None:
    """botocore's adaptive retries alone: a throttled request is sent again by the client, never
    by s3fs or by us on top (which once made 12 throttles cost 13 requests and up to 36 tries)."""
    _, proxy, bucket = s3
    url, options = s3_copy_of("two_actions"), _with_attempts(s3, 3)
    audit = AuditTrail(str(tmp_path))
    plan, planned = _plan(url, options, audit)
    proxy.reset()
    proxy.faults.slowdown = {"DeleteObjects": 2, "ListObjectsV2": 2}
    sleeps: list[float] = []
    result = apply_plan(plan, Storage(url, options), audit, sleep=sleeps.append)
    assert result.deleted.files == plan.files and not result.failed.files
    assert proxy.counts()["DeleteObjects"] == 3 and sleeps == []  # 2 throttles, 1 success; no re-drive

    url = s3_copy_of("two_actions")
    plan, planned = _plan(url, options, audit)
    proxy.reset()
    proxy.faults.slowdown = {"DeleteObjects": 5}  # more than the 3 attempts allow
    result = apply_plan(plan, Storage(url, options), audit, sleep=sleeps.append)
    assert proxy.counts()["DeleteObjects"] == 3 and not result.deleted.files
    assert result.failed.files == plan.files and all("SlowDown" in o.why for o in result.failed.sample)
    # One listing, not a HEAD per object (a quarter of a second each here).
    left = set(_direct(s3).find(url[len("s3://") :]))
    assert {f"{url[len('s3://') :]}/{c.path}" for c in planned} <= left


def test_the_audit_trail_on_s3_names_objects_that_exist(s3, s3_copy_of) -> None:
    server, proxy, bucket = s3
    url, options = s3_copy_of("two_actions"), _via_proxy(s3)
    audit = AuditTrail(f"s3://{bucket}/audit-{url.rsplit('/', 2)[-2]}", options)
    plan, planned = _plan(url, options, audit)
    first = apply_plan(plan, Storage(url, options), audit)
    again = apply_plan(plan, Storage(url, options), audit)  # idempotent: everything already gone
    assert first.deleted.files == plan.files and not again.deleted.files
    direct = _direct(s3)
    assert audit.read_plan(plan.manifest) == dataclasses.replace(plan, digest="")
    assert direct.exists(plan.manifest[len("s3://") :])
    recorded = [
        json.loads(line) for line in direct.cat(audit.outcomes_url(plan)[len("s3://") :]).splitlines()
    ]
    assert [r["outcome"] for r in recorded] == ["deleted"] * plan.files + ["skipped"] * plan.files
    assert recorded == audit.outcomes(plan)


def test_a_listing_cut_part_way_fails_instead_of_shrinking(s3, s3_copy_of, tmp_path, monkeypatch) -> None:
    _, proxy, bucket = s3
    # Two requests per call, not the default ten: a page that fails is retried with back-off (up to
    # a minute and a half for each of the four calls below), and the retries are not what this tests.
    url, options = s3_copy_of("two_actions"), _with_attempts(s3, 2)
    audit = AuditTrail(str(tmp_path))
    plan, _ = _plan(url, options, audit)
    calls = [
        lambda: load_checkpoint(url, options),
        lambda: plan_of(Storage(url, options), audit),  # a plan can't be built from a partial listing
        lambda: apply_plan(plan, Storage(url, options), audit, sleep=lambda s: None),
    ]
    for call in calls:
        proxy.reset()  # its requests and its faults
        proxy.faults.cut_listing_after = 5
        with pytest.raises(StorageError, match="listing failed"):
            call()
        # the first page, then the cut page's two attempts: the listing stops there
        assert proxy.counts() == {"ListObjectsV2": 3}
    proxy.reset()
    proxy.faults.cut_listing_after = 5
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # the CLI takes the standard variable
    out = _cli(proxy, "gc", url, "--json")
    assert out.returncode == 2 and "listing failed" in out.stderr and "Traceback" not in out.stderr
    assert proxy.counts() == {"ListObjectsV2": 3}


def test_credentials_from_the_environment_and_clear_errors(s3, s3_copy_of) -> None:
    _, proxy, bucket = s3
    url = s3_copy_of("long_chain")
    env = {**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint, "AWS_SECRET_ACCESS_KEY": "wrong-secret-123"}
    denied = subprocess.run([CKPT, "inspect", url], capture_output=True, text=True, env=env, timeout=120)
    assert denied.returncode == 2 and "wrong-secret-123" not in denied.stderr + denied.stdout
    assert "Traceback" not in denied.stderr and len(denied.stderr.splitlines()) == 1, denied.stderr
    missing = _cli(proxy, "inspect", f"s3://{bucket}/no/such/checkpoint")
    assert missing.returncode == 2 and "no such" in missing.stderr


@pytest.mark.slow
def test_compaction_reads_and_writes_s3_and_spark_loads_the_result(
    s3, s3_copy_of, spark, corpus, corpus_root, tmp_path
) -> None:
    from checkpoint.compaction.targets import plan_compaction
    from jobs.compact import run_compaction
    from tests.checkpoint.compaction.test_compaction import _rows_of_partition, _snapshot_rows

    _, proxy, _ = s3
    url, options = s3_copy_of("long_chain"), _via_proxy(s3)
    ckpt = load_head(url, options, recent=2)
    targets, _ = plan_compaction(ckpt, min_chain=1, quiet_seconds=0)
    assert len(targets) == 4
    proxy.reset()
    results = run_compaction(spark, ckpt, targets)
    assert all(r.ok for r in results), results
    results = [r.rebuilt for r in results]
    counts = proxy.counts()
    assert counts["ListObjectsV2"] + counts["ListObjects"] == 0  # the driver hands each task its files
    written = sum(r.ssts_written for r in results)
    assert counts["PutObject"] == written + 2 * len(results)  # new SSTs, then each zip and its .crc
    # Before each zip, one HEAD per SST it lists (new or reused): never a listing of SSTs/. And
    # before anything is written, one for the zip's name and one for its sidecar's: both free.
    heads = [r.path for r in proxy.requests if r.op == "HeadObject"]
    listed = sum(r.ssts_written + r.ssts_reused for r in results)
    ssts = [p for p in heads if p.endswith(".sst")]
    names = sorted(p.rsplit("/", 1)[1] for p in heads if not p.endswith(".sst"))
    zips = sorted(r.path.rsplit("/", 1)[1] for r in results)
    assert len(ssts) == listed and names == sorted(zips + [z + ".crc" for z in zips]), heads
    assert counts["DeleteObject"] + counts["DeleteObjects"] == 0

    local = tmp_path / "snapshots-read"
    _direct(s3).get(url[len("s3://") :] + "/", str(local), recursive=True)
    for r in results:
        batch = r.version - 1
        expected = _rows_of_partition(spark, corpus["long_chain"], batch, r.partition, {})
        assert _snapshot_rows(spark, local, batch, r.partition, {}) == expected
    _restarts_like_untouched(s3, spark, corpus, corpus_root, url, tmp_path)


def _restarts_like_untouched(s3, spark, corpus, corpus_root, url: str, tmp_path: Path) -> None:
    """Copied from S3 to local disk, the changed checkpoint restarts the query like an untouched copy."""
    from testbed.corpus import scenario_named
    from tests.support.state import restart_like_untouched

    name = url.rsplit("/", 1)[-1]
    local, untouched = tmp_path / "from-s3" / name, tmp_path / "untouched" / name
    _direct(s3).get(url[len("s3://") :] + "/", str(local), recursive=True)
    copy_checkpoint(corpus[name], untouched)
    extra = tmp_path / "more-input"
    restart_like_untouched(spark, scenario_named(name), corpus_root / name, local, untouched, extra)


def test_dagster_assets_on_an_s3_root_never_leak_credentials(s3, s3_copy_of) -> None:
    import dagster as dg

    from assets.checkpoints import checkpoint_inventory, checkpoint_lineage_report
    from assets.cleanup import checkpoint_orphan_cleanup, checkpoint_orphan_plan
    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource

    server, _, bucket = s3
    s3_copy_of("two_actions", prefix="dagster/team-a")
    options = _root_options(s3)
    with pytest.raises(ValueError, match="holds a credential"):  # refused where Dagster would keep it
        CheckpointRoot(name="s3", url=f"s3://{bucket}/dagster", storage_options=_via_proxy(s3))
    root = CheckpointRoot(name="s3", url=f"s3://{bucket}/dagster", storage_options=options)
    roots = CheckpointRootsResource(roots=[root], audit_url=f"s3://{bucket}/audit")
    key = partition_key("s3", "team-a/two_actions")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [key])
        assets = [checkpoint_inventory, checkpoint_lineage_report, checkpoint_orphan_plan]
        resources = {"roots": roots}
        assets.append(checkpoint_orphan_cleanup)
        result = dg.materialize(assets, partition_key=key, instance=instance, resources=resources)
        assert result.success
        plan = next(iter(result.asset_materializations_for_node("checkpoint_orphan_plan")))
        assert str(plan.metadata["manifest"].value).startswith(f"s3://{bucket}/audit/")
        # Everything Dagster stored about the run: events, metadata, logs, and the job snapshot
        # that the UI serves (it holds the resources' configuration).
        run = instance.get_run_by_id(result.run_id)
        stored = "\n".join(str(e) for e in instance.all_logs(result.run_id)) + str(run)
        stored += dg._serdes.serialize_value(instance.get_job_snapshot(run.job_snapshot_id))
    assert server.secret_key not in stored and "secret" not in stored.lower()
    assert "two_actions" in stored


def test_the_lease_on_s3_is_a_conditional_put(s3, tmp_path) -> None:
    from checkpoint.errors import LeaseHeld
    from checkpoint.safety.lease import Lease

    _, proxy, bucket = s3
    options = _via_proxy(s3)
    a = Lease(Storage(f"s3://{bucket}/audit-lease", options), "orders-1234", "ckpt compact")
    b = Lease(
        Storage(f"s3://{bucket}/audit-lease", options),
        "orders-1234",
        "dagster run 9c1e (checkpoint_compaction)",
    )
    a.acquire()
    with pytest.raises(LeaseHeld, match="ckpt compact"):
        b.acquire()
    proxy.reset()
    with pytest.raises(FileExistsError):  # S3 itself refuses a second create of a generation
        b.storage.write_if_absent(a._rel(a.generation), b"{}", ".ckpt-maint-")
    assert proxy.counts() == {"PutObject": 1} and proxy.requests[0].condition == "If-None-Match"
    proxy.reset()
    taken = tmp_path / "taken"
    taken.write_bytes(b"not a generation")
    with pytest.raises(FileExistsError):  # and so does a file put streamed from disk
        b.storage.put_new(str(taken), a._rel(a.generation), ".ckpt-maint-")
    assert proxy.counts() == {"PutObject": 1} and proxy.requests[0].condition == "If-None-Match"
    a.release()
    b.acquire()
    assert b.current()[1].owner.startswith("dagster run 9c1e")
    b.release()
    assert b.current() is None


def test_one_holder_ever_on_s3_the_aba_sequence_and_a_renewal_by_etag(s3) -> None:
    """The ABA sequence of the local test, on SeaweedFS: generations never repeat, the stale holder
    stops; and a renewal is a PUT `If-Match` on the ETag its holder wrote, so a generation someone
    else rewrote is never renewed over. Real time, with a TTL of 2 s: a takeover needs the record
    unwritten for the TTL by S3's own clock (LastModified, whole seconds), which no manual clock moves."""
    from checkpoint.errors import LeaseHeld, LeaseLost
    from checkpoint.safety.lease import Lease

    _, proxy, bucket = s3
    options = _via_proxy(s3)

    def lease(owner: str) -> Lease:
        return Lease(Storage(f"s3://{bucket}/audit-aba", options), "q", owner, ttl=2)

    a = lease("A").acquire()
    with pytest.raises(LeaseHeld, match="A on"):
        lease("B").acquire()
    time.sleep(2.2)  # A stalls past its expiry and its TTL
    b = lease("B").acquire()
    assert b.took_over is not None and b.took_over.owner == "A"
    held_by_b = b.generation
    b.release()
    d = lease("D").acquire()
    assert d.generation > held_by_b > a.generation
    a._expires = time.time() + 60  # even were A to believe it renewed in time
    with pytest.raises(LeaseLost):
        a.check()
    proxy.reset()
    d.renew()
    assert [(r.op, r.condition) for r in proxy.requests if r.method == "PUT"] == [("PutObject", "If-Match")]
    # Someone rewrites D's generation behind its back (same token, so only the ETag can tell).
    d.storage.write(d._rel(d.generation), d._body(time.time() + 61))  # other bytes, another ETag
    with pytest.raises(LeaseLost, match="changed under its holder"):
        d.renew()


def test_a_download_is_one_ranged_get_per_chunk_and_catches_a_wrong_size(s3, tmp_path) -> None:
    import crc32c

    _, proxy, bucket = s3
    data = os.urandom(2500)
    _direct(s3).pipe(f"{bucket}/download/blob", data)
    storage = Storage(f"s3://{bucket}/download", _via_proxy(s3))
    proxy.reset()
    assert storage.download("blob", str(tmp_path / "a"), 2500, chunk=1000) == (2500, crc32c.crc32c(data))
    assert (tmp_path / "a").read_bytes() == data
    assert proxy.counts() == {"GetObject": 3}  # the size came from the zip's metadata: no HEAD
    for expected, read in ((2499, 2500), (2501, 2500)):  # one byte longer, one byte shorter than listed
        with pytest.raises(StorageError, match=f"read {read} bytes where {expected} were expected"):
            storage.download("blob", str(tmp_path / "b"), expected, chunk=1000)
    proxy.reset()
    assert storage.download("blob", str(tmp_path / "c"), chunk=4096)[0] == 2500  # size unknown: a HEAD
    assert proxy.counts() == {"HeadObject": 1, "GetObject": 1}


def test_the_fleet_report_sends_requests_per_checkpoint_not_per_file(s3) -> None:
    """50 synthetic checkpoints, 5 of them with nearly three times the files of the others: the
    report costs each what one checkpoint of either kind costs alone, and no request more when it
    also tells whether a target Spark restarts each (the snapshots' metadata is read anyway)."""
    import dagster as dg

    from assets.fleet import checkpoint_fleet_report
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from testbed import synthetic

    server, proxy, bucket = s3
    # versions equal modulo 10 (the same replay chains); no hidden Hadoop crcs, as on S3
    content, kinds = {}, {"small": (22, 45), "big": (62, 5)}
    for name, (versions, count) in kinds.items():
        files = {r: d for r, d in synthetic.files(1, versions, window=2).items() if "/." not in f"/{r}"}
        for i in range(count):
            content.update({f"{bucket}/fleet/{name}-{i:03d}/{rel}": data for rel, data in files.items()})
    server.filesystem().pipe(content)
    root = CheckpointRoot(name="s3", url=f"s3://{bucket}/fleet", storage_options=_root_options(s3))

    def report(keys: list[str], target: str | None = None):
        roots = CheckpointRootsResource(roots=[root], target_spark=target)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("checkpoints", keys)
            proxy.reset()
            result = dg.materialize([checkpoint_fleet_report], instance=instance, resources={"roots": roots})
            assert result.success
            (mat,) = result.asset_materializations_for_node("checkpoint_fleet_report")
            assert mat.metadata["checkpoints"].value == len(keys)
            assert target is None or mat.metadata["restart_on_target"].value == len(keys)
            return proxy.counts()

    small, big = report(["s3:small-000"]), report(["s3:big-000"])
    assert small == big and small["GetObject"] > 0, (small, big)
    assert report(["s3:big-000"], target="4.1") == big
    everything = report(sorted(f"s3:{n}-{i:03d}" for n, (_, count) in kinds.items() for i in range(count)))
    # One PUT a report, whatever the fleet: the whole table's CSV in the audit root.
    assert small["PutObject"] == everything["PutObject"] == 1, (small, everything)
    reads = {op: n for op, n in everything.items() if op != "PutObject"}
    assert reads == {op: 50 * n for op, n in small.items() if op != "PutObject"}, everything


def test_a_fork_goes_local_to_s3_to_s3_and_back_and_restarts_like_the_original(
    s3, spark, corpus, corpus_root, tmp_path
) -> None:
    """list_state: operator metadata v2 names its schema by absolute path, which each hop moves."""
    from testbed.corpus import scenario_named
    from tests.support.forking import fork
    from tests.support.state import restart_like_untouched

    _, proxy, bucket = s3
    options = _via_proxy(s3)
    name = "list_state"
    a, b = f"s3://{bucket}/forks/{name}-a", f"s3://{bucket}/forks/{name}-b"
    to_s3 = fork(Storage(str(corpus[name])), Storage(a, options))
    assert to_s3.server_side_files == 0 and to_s3.copied_files == to_s3.files
    meta = _direct(s3).cat_file(f"{a[len('s3://') :]}/state/0/_metadata/v2/0").decode()
    assert (
        f'"s3a://{a[len("s3://") :]}/state/0/_stateSchema/default/' in meta and str(corpus[name]) not in meta
    )

    proxy.reset()
    within = fork(Storage(a, options), Storage(b, options))
    counts = proxy.counts()
    written = {"metadata", "state/0/_metadata/v2/0"} | {r for r in _keys(s3, b) if r.endswith(".crc")}
    assert within.server_side_files == within.files - len(written)  # all but what was rewritten or read
    assert counts["CopyObject"] == within.server_side_files
    assert not [r.path for r in proxy.requests if r.op == "GetObject" and r.path.endswith(".sst")]

    back = tmp_path / "back" / name
    home = fork(Storage(b, options), Storage(str(back)))
    assert {str(p.relative_to(back)) for p in back.rglob("*") if p.is_file()} == set(_keys(s3, a))
    assert home.files == to_s3.files == within.files
    assert f"file:{back}/state/0/_stateSchema/" in (back / "state/0/_metadata/v2/0").read_text()
    untouched = tmp_path / "untouched" / name
    copy_checkpoint(corpus[name], untouched)
    scenario = scenario_named(name)
    restart_like_untouched(spark, scenario, corpus_root / name, back, untouched, tmp_path / "more-input")


def _keys(s3, url: str) -> list[str]:
    root = url[len("s3://") :]
    return [k[len(root) + 1 :] for k in _direct(s3).find(root)]


def test_a_fork_reads_what_recovery_reads_not_the_history(s3, s3_histories) -> None:
    from tests.support.forking import fork

    _, proxy, bucket = s3
    options = _via_proxy(s3)
    counts, results = {}, {}
    for name, url in s3_histories.items():
        proxy.reset()
        results[name] = fork(Storage(url, options), Storage(f"s3://{bucket}/history-forks/{name}", options))
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["CopyObject"] > 0, counts
    assert results["small"].files == results["big"].files


def test_a_rehearsal_scratch_reads_what_recovery_reads_not_the_history(s3, s3_histories, tmp_path) -> None:
    """The rehearsal's scratch fork (at N-1, with N's offsets and source logs) from S3 to local disk:
    the same requests for two checkpoints that differ only in history."""
    from checkpoint.rehearsal.scratch import scratch_fork
    from checkpoint.safety import TwoSided, taken_at_once

    _, proxy, _ = s3
    counts, files = {}, {}
    for name, url in s3_histories.items():
        proxy.reset()
        request = TwoSided(
            Storage(url, _via_proxy(s3)), Storage(str(tmp_path / name)), taken_at_once("tests")
        )
        scratch = scratch_fork(request)
        counts[name], files[name] = proxy.counts(), scratch.fork.files + scratch.planned_files
    assert counts["small"] == counts["big"] and counts["small"]["GetObject"] > 0, counts
    assert files["small"] == files["big"]


def test_an_s3_checkpoint_repartitioned_undone_and_again_restarts_like_its_control(
    s3, spark, corpus, corpus_root, tmp_path
) -> None:
    """Spark's repartitioner and the restarted query reach the bucket through s3a (the session's
    per-bucket settings from the storage's own options); the listing before, the backup fork, the
    records and the undo go through fsspec."""
    from checkpoint.safety import InPlace, taken_at_once
    from jobs.repartition import RepartitionOptions, UndoOptions, repartition, undo_repartition
    from testbed.restart import differences, restart
    from tests.support.forking import fork

    server, _, bucket = s3
    options = server.storage_options()  # straight to the server: Spark's client is not counted
    name = "snapshots"
    untouched = tmp_path / "untouched"
    copy_checkpoint(corpus[name], untouched)
    storage = Storage(f"s3://{bucket}/repartition/{name}", options)
    fork(Storage(str(corpus[name])), storage)  # as Spark would have written it there
    audit = AuditTrail(f"s3://{bucket}/repartition-audit", options)

    def tree() -> dict[str, int]:
        return {f.rel: f.size for f in storage.list_files()}

    before = tree()
    request = InPlace(storage, taken_at_once("tests"))
    first = repartition(lambda: spark, request, RepartitionOptions(audit, 8, quiet_seconds=0))
    assert {f.rel.split("/")[2] for f in storage.list_files("state/0") if f.rel.endswith(".zip")} >= {
        str(p) for p in range(8)
    }
    undone = undo_repartition(request, UndoOptions(audit, query_stopped=True))
    assert undone.deleted > 0 and tree() == before
    again = repartition(lambda: spark, request, RepartitionOptions(audit, 8, quiet_seconds=0))
    for result in (first, again):
        assert (result.from_partitions, result.to_partitions) == (4, 8)
        assert all(s.digest_after == s.digest_before and s.rows > 0 for s in result.stores)
    changed = restart(spark, name, corpus_root / name, storage.spark_url, tmp_path / "extra")
    control = restart(spark, name, corpus_root / name, untouched, tmp_path / "extra")
    assert not differences(changed, control)


def test_spark_reaches_a_bucket_as_the_storage_does(spark) -> None:
    """Per-bucket s3a settings from the storage's options: an AWS endpoint keeps virtual-host
    addressing and TLS, a session token picks the temporary-credentials provider; another bucket and
    a local root get nothing."""
    from jobs.spark_session import reach

    options = {"key": "AKIA-test", "secret": "s3cr3t", "token": "t0ken",
               "client_kwargs": {"endpoint_url": "https://s3.eu-west-1.amazonaws.com",
                                 "region_name": "eu-west-1"}}  # fmt: skip
    reach(spark, Storage("s3://reach-test-bucket/team/orders", options))
    reach(spark, Storage("/tmp/a-local-checkpoint"))
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    got = {k: hadoop.get(f"fs.s3a.bucket.reach-test-bucket.{k}") for k in (
        "endpoint", "connection.ssl.enabled", "path.style.access", "endpoint.region", "access.key",
        "secret.key", "session.token", "aws.credentials.provider")}  # fmt: skip
    assert got == {
        "endpoint": "https://s3.eu-west-1.amazonaws.com",
        "connection.ssl.enabled": "true",
        "path.style.access": "false",
        "endpoint.region": "eu-west-1",
        "access.key": "AKIA-test",
        "secret.key": "s3cr3t",
        "session.token": "t0ken",
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    }
    assert hadoop.get("fs.s3a.bucket.another-bucket.endpoint") is None


@pytest.mark.parametrize("name", ["hdfs_agg", "rocksdb_v1_changelog"])
def test_spark_default_formats_on_s3_read_clean_and_fork_as_locally(s3, s3_copy_of, defaults, name) -> None:
    """The HDFS-backed store and RocksDB V1 on S3: lineage and `validate --deep` give the local
    answers, head-first with one shallow listing per store folder and no recursive listing; a
    cleanup deletes what the local plan names; a fork S3 to S3 copies server-side and validates."""
    from checkpoint.analysis.checks import validate
    from checkpoint.cleanup.apply import apply_plan
    from checkpoint.model.head import load_head
    from tests.support.forking import fork
    from tests.support.planning import candidates_of, plan_of

    _, proxy, bucket = s3
    url = s3_copy_of(name)
    for command in (["lineage"], ["validate", "--deep"]):
        remote, local = (
            _cli(proxy, *command, url, "--json"),
            _cli(proxy, *command, str(defaults[name]), "--json"),
        )
        assert remote.returncode == local.returncode == 0, (command, remote.stderr)
        assert _same(json.loads(remote.stdout), url, json.loads(local.stdout), str(defaults[name])), command
    storage = Storage(url, _via_proxy(s3))
    head = load_head(storage, strict=False)
    assert validate(head).ok
    calls = storage.calls.snapshot()
    stores = len({e.store for e in validate(head).lineage})
    # The root, both logs, `state/`, the operator's metadata; the operator's partition folders and
    # its first partition's store folders (what the metadata declares is checked against them);
    # then each store's folder, which recovery lists in format V1.
    assert calls["list"] == 0 and calls["list_dir"] <= 7 + stores, calls
    later = time.time() + 7 * 3600
    remote_plan = plan_of(Storage(url, _via_proxy(s3)), retain_batches=2, now=later)
    local_plan = plan_of(defaults[name], retain_batches=2, now=later)
    assert sorted(c.path for c in candidates_of(remote_plan)) == sorted(
        c.path for c in candidates_of(local_plan)
    )
    audit = AuditTrail(f"s3://{bucket}/audit-{name}", _via_proxy(s3))
    plan = plan_of(Storage(url, _via_proxy(s3)), audit=audit, retain_batches=2, now=later)
    result = apply_plan(plan, Storage(url, _via_proxy(s3)), audit)
    assert plan.files > 0 and result.deleted.files == plan.files and not result.failed.files
    forked = f"s3://{bucket}/forked-{name}"
    done = fork(Storage(url, _via_proxy(s3)), Storage(forked, _via_proxy(s3)))
    assert done.server_side_files > 0 and done.files == done.copied_files
    assert _cli(proxy, "validate", forked).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hdfs_deltas", "rocksdb_v1_changelog"])
def test_v1_compaction_on_s3_publishes_by_conditional_puts_and_spark_loads_the_snapshot_alone(
    s3, s3_copy_of, spark, defaults, tmp_path, name
) -> None:
    """The chain downloaded by name (no listing), each snapshot or zip published by one PUT that
    the store refuses over an existing object; copied back, Spark's reader loads the latest state
    from the new snapshots with every chain file before them gone."""
    from checkpoint.compaction.targets import plan_compaction
    from jobs.compact import run_compaction
    from jobs.spark_session import scoped_confs
    from tests.support.damage import remove
    from tests.support.defaults import V1_SESSION
    from tests.support.state import read_state

    _, proxy, _ = s3
    url = s3_copy_of(name)
    ckpt = load_head(url, _via_proxy(s3), recent=2)
    targets, _ = plan_compaction(ckpt, min_chain=3, quiet_seconds=0)
    assert len(targets) == 4
    proxy.reset()
    results = run_compaction(spark, ckpt, targets)
    assert all(r.ok for r in results), [r.error for r in results]
    counts = proxy.counts()
    assert counts["ListObjectsV2"] + counts["ListObjects"] == 0
    assert counts["DeleteObject"] + counts["DeleteObjects"] == 0
    written = sum(r.rebuilt.ssts_written for r in results)  # none for the HDFS-backed store
    assert counts["PutObject"] == written + len(results)  # V1: no .crc sidecar
    local = tmp_path / name
    _direct(s3).get(url[len("s3://") :] + "/", str(local), recursive=True)
    for t in targets:
        for f in (t.entry.base, *t.entry.chain):
            if f is not None:
                remove(local / f.rel)
    batch = ckpt.latest_committed_batch
    with scoped_confs(spark, V1_SESSION):
        assert read_state(spark, local, batch, name) == read_state(spark, defaults[name], batch, name)


@pytest.mark.slow
@pytest.mark.parametrize(("where", "name"), [("s3-to-s3", "hdfs_agg"), ("local-to-s3", "hdfs_agg"),
                                             ("s3-to-s3", "rocksdb_v1_every_state")])  # fmt: skip
def test_a_migration_onto_s3_restarts_like_its_source(
    s3, s3_copy_of, spark, defaults, tmp_path, where, name
) -> None:
    """SeaweedFS to SeaweedFS (the logs copied server-side, no listing of SRC's state) and a local
    source to S3, of an aggregation and of transformWithState's column families (value, list and
    map state with TTLs): DEST, forked back, validates as V2 and the real query restarts on it like
    an untouched copy of the source."""
    from checkpoint.migrate import MigrationOptions
    from checkpoint.safety import TwoSided, taken_at_once
    from jobs.migrate import migrate
    from tests.checkpoint.migrate.test_migrate import restarted_differently

    _, proxy, bucket = s3
    src = Storage(s3_copy_of(name), _via_proxy(s3)) if where == "s3-to-s3" else Storage(str(defaults[name]))
    dest = Storage(f"s3://{bucket}/migrated-{where}-{name}", _via_proxy(s3))
    audit = AuditTrail(f"s3://{bucket}/audit-migrate-{where}-{name}", _via_proxy(s3))
    proxy.reset()
    request = TwoSided(src, dest, taken_at_once("tests"))
    result = migrate(lambda: spark, request, MigrationOptions(audit, quiet_seconds=0))
    assert result.proven and len(result.stores) == 4
    if where == "s3-to-s3":  # every log file but the batch's rewritten two is copied server-side
        ours = [
            r.path for r in proxy.requests if r.op == "CopyObject" and f"migrated-{where}-{name}" in r.path
        ]
        copied = {"/".join(p.rsplit("/", 2)[-2:]) for p in ours}
        logs = {f"{kind}/{b}" for kind in ("offsets", "commits") for b in range(result.batch)}
        assert logs <= copied and not {f"offsets/{result.batch}", f"commits/{result.batch}"} & copied
    local, control = tmp_path / "dest", copy_checkpoint(defaults[name], tmp_path / "control")
    # Forked back, not copied: the fork rewrites the schema paths a transformWithState operator records.
    assert _cli(proxy, "fork", dest.url, str(local)).returncode == 0
    assert ckpt("validate", str(local)).returncode == 0
    if where == "local-to-s3":
        return  # the same DEST as from S3; one restart proves it
    assert not restarted_differently(spark, name, defaults[name].parent, local, control, tmp_path / "more")


def test_retirement_archives_to_another_bucket_and_deletes_in_batches_of_requests(s3, s3_copy_of) -> None:
    """On a manual clock (an upload is new to S3): planned nine days on, applied after the grace.
    What an apply costs per checkpoint, counted at the proxy: the fork of what recovery reads (the
    same requests as a plain fork of a copy), one DeleteObjects and one record per batch of
    deletions, and a constant (two leases, two listings, the other records)."""
    from checkpoint.analysis import Severity, validate
    from checkpoint.retire import (
        RetireOptions,
        apply_retirement,
        plan_retirement,
        read_retirement,
        retirement_request,
    )
    from checkpoint.safety import taken_at_once
    from tests.support.forking import fork

    _, proxy, bucket = s3
    options = _via_proxy(s3)
    cold = f"{bucket}-cold"
    _direct(s3).mkdir(cold)
    proxy.reset()
    fork(Storage(s3_copy_of("long_chain"), options), Storage(f"s3://{cold}/plain", options))
    plain = sum(proxy.counts().values())
    later = time.time() + 9 * 86400
    cost = {}
    for size in (100, 1000):
        url = s3_copy_of("long_chain")
        archive = Storage(f"s3://{cold}/orders-{size}", options)
        trail = AuditTrail(AuditTrail.default_for(url), options)
        plan = plan_retirement(Storage(url, options), trail, archive=archive, now=later)
        assert plan.files == len(_keys(s3, url))
        _, read = read_retirement(plan.manifest, options)
        proxy.reset()
        request = retirement_request(Storage(url, options), archive, taken_at_once("test"))
        retired = apply_retirement(request, RetireOptions(read, trail, later + 8 * 86400, batch_size=size))
        counts = proxy.counts()
        fs = _direct(s3)
        fs.invalidate_cache()  # SeaweedFS keeps an emptied folder as a "directory" entry: no object
        assert not [k for k, v in fs.find(url[len("s3://") :], detail=True).items() if v["type"] == "file"]
        assert retired.deleted_files == plan.files
        assert counts["DeleteObjects"] == math.ceil(plan.files / size)
        forked = {r.path for r in proxy.requests if r.op == "CopyObject"}
        assert forked and all(f"/{cold}/orders-{size}/" in p for p in forked)  # server-side, the other bucket
        findings = validate(load_head(archive, strict=True)).findings
        assert not [f for f in findings if f.severity == Severity.ERROR]
        cost[size] = sum(counts.values()) - plain
    batches = math.ceil(plan.files / 100) - math.ceil(plan.files / 1000)
    # A batch more: its DeleteObjects, its record (a part object on S3) and that part read when
    # sealed, and the check of both leases before it (a listing and a GET each).
    assert cost[100] - cost[1000] == 7 * batches, cost
    # The rest: the archive read back and validated (what recovery reads, as the fork), leases,
    # listings and records: never more than the fork itself.
    print("S3 retirement requests beyond a plain fork", plain, cost)
    assert cost[1000] <= plain, (plain, cost)


def test_expired_state_on_s3_is_reported_as_locally_purged_and_restarts_like_its_control(
    s3, spark, tmp_path
) -> None:
    """The report names every file from the logs (no listing inside a store's folder), equals the
    local one; the purge publishes each store's snapshot by conditional puts, and the query
    restarted from the bucket (s3a) ends like an untouched local copy."""
    from jobs.spark_session import reach
    from testbed.operators import ensure_operator_corpus
    from testbed.restart import differences, restart
    from tests.checkpoint.expiry.test_expiry import NAME, by_variable, stopped_copy

    server, proxy, bucket = s3
    corpus = ensure_operator_corpus()
    url = upload_checkpoint(server.filesystem(), corpus / NAME / "checkpoint", f"{bucket}/expiry/{NAME}")
    control = stopped_copy(corpus, tmp_path / "control")
    as_of = str(time.time())

    def run(*args: str) -> dict:
        out = _cli(proxy, "purge-expired", url, "--as-of", as_of, "--json", *args)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    local = json.loads(ckpt("purge-expired", str(control), "--report", "--as-of", as_of, "--json").stdout)
    proxy.reset()
    report = run("--report")
    assert by_variable(report) == by_variable(local) and report["expired"] > 0
    inside = [
        r for r in proxy.requests if r.op == "ListObjectsV2" and re.search(r"state/\d+/\d+", r.prefix or "")
    ]
    assert inside == []  # every state file named from the logs and the zips
    proxy.reset()
    done = run("--quiet-period", "0s")  # just uploaded: its objects are minutes old
    assert {s["outcome"] for s in done["stores"]} == {"purged"} and done["expired"] == report["expired"]
    puts = [r for r in proxy.requests if r.op == "PutObject" and r.path.endswith(".zip")]
    assert len(puts) == len(done["stores"]) and all(r.condition for r in puts)  # If-None-Match: never over
    assert run("--report")["expired"] == 0
    reach(spark, Storage(url, server.storage_options()))  # Spark's s3a settings for the bucket
    changed = restart(spark, NAME, corpus / NAME, Storage(url).spark_url, tmp_path / "extra")
    assert differences(changed, restart(spark, NAME, corpus / NAME, control, tmp_path / "extra")) == []
