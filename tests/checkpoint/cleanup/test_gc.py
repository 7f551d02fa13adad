"""Orphan cleanup on real checkpoints: nothing any retained batch reads is ever deleted."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from checkpoint.cleanup.apply import check_plan
from checkpoint.crash import CRASH_ENV
from checkpoint.errors import GcError, OutsideCheckpointError
from checkpoint.format.layout import FileKind, classify
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from testbed.corpus import scenario_named
from tests.support.planning import (
    LATER,
    apply_unleased,
    candidates_of,
    manifest_lines,
    plan_later,
    plan_of,
    planned_in_a_fresh_process,
)
from tests.support.state import read_state, restart_like_untouched

V2 = [
    "long_chain", "snapshots", "watermark", "retention", "killed_before_restart", "killed_after_restart",
    "task_retry", "two_actions", "dedup_agg", "join", "join_cf", "list_state", "zstd",
]  # fmt: skip


def outside_state(path: Path) -> dict[str, tuple[int, float]]:
    return {
        p.relative_to(path).as_posix(): (p.stat().st_size, p.stat().st_mtime)
        for p in path.rglob("*")
        if p.is_file() and p.relative_to(path).parts[0] != "state"
    }


def _copy(corpus: dict[str, Path], name: str, dst: Path) -> Path:
    copy_checkpoint(corpus[name], dst)
    return dst


def test_every_scenario_plans_format_v1_too(corpus) -> None:
    for name in [*V2, "format_v1"]:
        plan = plan_later(corpus[name])
        assert plan.live == (name == "killed_before_restart"), name
        assert all(c.path.startswith("state/") for c in candidates_of(plan))


def test_reasons_on_real_attempts(corpus, copy_of) -> None:
    from tests.support.damage import remove

    assert plan_later(corpus["two_actions"]).by_reason.keys() == {"superseded", "unreferenced_sst"}
    assert plan_later(corpus["task_retry"]).by_reason.keys() == {"uncommitted_attempt"}
    assert plan_later(corpus["killed_after_restart"]).by_reason.keys() == {"uncommitted_attempt"}
    # Below the window: versions whose batches Spark already purged from the commit log. The driver
    # purges its logs as each batch ends; the state files go when maintenance next runs, on its
    # timer, so whether `retention` still holds any is the generation's timing (a cold cache once
    # held none). Derived: `snapshots` (which plans nothing) with the logs of its first 8 batches
    # purged as the driver does: its older versions go.
    assert set(plan_later(corpus["retention"]).by_reason) <= {"below_retention_window"}
    assert not plan_later(corpus["snapshots"]).by_reason
    purged = copy_of("snapshots")
    for log in ("commits", "offsets"):
        for batch in range(8):
            remove(purged / log / str(batch))
    planned = candidates_of(plan_later(purged))
    assert {c.reason for c in planned} <= {"below_retention_window", "unreferenced_sst"}
    assert any(c.reason == "below_retention_window" for c in planned)
    # The SSTs that only the zips below the window list go with them. Whether any is left on disk is
    # Spark's timing again (its maintenance deletes SSTs no retained zip lists, and RocksDB's own
    # compaction decides which SSTs a newer zip still lists), so the expectation is read from the
    # zips: recovery of batch 8 (version 9) starts from each partition's newest zip at or below 9.
    unreferenced = {c.path for c in planned if c.reason == "unreferenced_sst" and c.path.endswith(".sst")}
    assert unreferenced == _listed_only_below(purged, 9)


def _listed_only_below(checkpoint: Path, version: int) -> set[str]:
    """The SST files on disk that only zips older than the one recovery of `version` starts from
    list, read straight from the zips' `metadata` entries."""
    only_below: set[str] = set()
    for partition in (checkpoint / "state" / "0").iterdir():
        zips = {int(z.name.split("_")[0]): z for z in partition.glob("*.zip")}
        start = max((v for v in zips if v <= version), default=0)
        listed = {v: _ssts_of(z) for v, z in zips.items()}
        kept = set().union(*(names for v, names in listed.items() if v >= start))
        older = set().union(*(names for v, names in listed.items() if v < start))
        only_below |= {
            f"state/0/{partition.name}/SSTs/{name}"
            for name in older - kept
            if (partition / "SSTs" / name).exists()
        }
    return only_below


def _ssts_of(zip_path: Path) -> set[str]:
    with zipfile.ZipFile(zip_path) as z:
        metadata = z.read("metadata").decode().splitlines()
    return {f["dfsSstFileName"] for f in json.loads(metadata[1])["sstFiles"]}


def test_grace_below_15_minutes_is_refused(corpus) -> None:
    with pytest.raises(GcError, match="below 15 minutes"):
        plan_of(corpus["two_actions"], grace_seconds=600)
    assert plan_later(corpus["two_actions"], grace_seconds=600, allow_short_grace=True).files > 0


def test_young_files_stay(corpus) -> None:
    ckpt = load_checkpoint(str(corpus["two_actions"]))
    # The manual clock stands at the moment the query wrote its last file, however old the cached
    # corpus is by now: every file is younger than the 6 h grace.
    written = max(f.info.mtime for f in ckpt.files if f.info.mtime is not None)
    assert plan_of(corpus["two_actions"], now=written).files == 0
    assert plan_of(corpus["two_actions"], now=written).kept["younger_than_grace"] > 0


def test_files_without_mtime_stay(corpus) -> None:
    """A backend that gives no mtime for some files: those are never candidates, whatever the
    clock, and neither are the sidecars that belong to them."""
    from checkpoint.format.layout import FileKind, classify
    from checkpoint.storage import FileInfo

    candidates = {c.path for c in candidates_of(plan_later(corpus["two_actions"]))}
    mains = sorted(p for p in candidates if classify(p).kind in (FileKind.CHANGELOG, FileKind.ZIP))
    undated = set(mains[::2])  # every other orphaned changelog or zip loses its mtime

    def lister(storage, folder: str) -> list[FileInfo]:
        return [FileInfo(f.rel, f.size, None) if f.rel in undated else f for f in storage.list_files(folder)]

    plan = plan_later(corpus["two_actions"], lister=lister)
    remaining = {c.path for c in candidates_of(plan)}
    sidecars = {p for p in candidates if classify(p).main in undated}
    assert undated and sidecars and plan.kept["no_mtime"] == len(undated)
    assert not remaining & (undated | sidecars) and remaining < candidates
    assert set(mains) - undated <= remaining  # the dated orphans still go


@pytest.mark.slow
@pytest.mark.parametrize("name", V2)
def test_apply_keeps_state_and_the_query_restarts_like_an_untouched_copy(
    spark, corpus_root, corpus, tmp_path, name
) -> None:
    scenario = scenario_named(name)
    cleaned = _copy(corpus, name, tmp_path / "cleaned")
    untouched = _copy(corpus, name, tmp_path / "untouched")
    ckpt = load_checkpoint(str(cleaned))
    window = sorted(b.id for b in ckpt.batches.values() if b.committed)[-2:]
    before = {b: read_state(spark, cleaned, b, scenario.name) for b in window}
    outside = outside_state(cleaned)

    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(
        cleaned, audit=audit, retain_batches=2
    )  # the last two batches: as aggressive as allowed
    result = apply_unleased(plan, ckpt.storage, audit)
    assert not result.failed.files and result.deleted.files == plan.files

    assert {b: read_state(spark, cleaned, b, scenario.name) for b in window} == before
    assert all(isinstance(rows, list) for rows in before.values())
    assert outside_state(cleaned) == outside
    assert plan_later(cleaned, retain_batches=2).files == 0  # a second run plans nothing

    extra = tmp_path / "more-input"
    final = restart_like_untouched(spark, scenario, corpus_root / scenario.name, cleaned, untouched, extra)
    assert final > window[-1]


@pytest.mark.parametrize("name", ["killed_after_restart", "task_retry", "two_actions"])
def test_every_uncommitted_attempt_is_gone(copy_of, tmp_path, name) -> None:
    path = copy_of(name)
    audit = AuditTrail(str(tmp_path / "audit"))
    apply_unleased(plan_later(path, audit=audit), Storage(str(path)), audit)
    ckpt = load_checkpoint(str(path))
    newest = ckpt.latest_committed_batch + 1
    for sid, store in ckpt.stores.items():
        for version, by_uid in store.by_version.items():
            if version <= newest:
                assert set(by_uid) == {ckpt.committed_unique_id(version - 1, sid)}, (sid, version)
    # Their hidden Hadoop crcs went with them.
    names = {p.name for p in path.rglob(".*.crc")}
    assert all(n[1:-4] in {p.name for p in path.rglob("*")} for n in names)


def test_second_apply_of_the_same_plan_deletes_nothing(copy_of, tmp_path) -> None:
    path = copy_of("two_actions")
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(path, audit=audit)
    storage = Storage(str(path))
    first = apply_unleased(plan, storage, audit)
    second = apply_unleased(plan, storage, audit)
    assert first.deleted.files == plan.files > 0
    assert not second.deleted.files and not second.failed.files
    assert set(second.skipped.whys) == {"already gone"} and second.skipped.files == plan.files
    lines = [json.loads(line) for line in Path(audit.outcomes_url(plan)).read_text().splitlines()]
    assert len(lines) == 2 * plan.files
    # The header reads back as planned; the digest is never taken from the manifest itself.
    assert audit.read_plan(plan.manifest) == dataclasses.replace(plan, digest="")


def test_a_changed_file_is_skipped_not_deleted(copy_of, tmp_path) -> None:
    path = copy_of("two_actions")
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(path, audit=audit)
    victim = path / candidates_of(plan)[0].path
    os.utime(victim, (time.time(), time.time()))
    result = apply_unleased(plan, Storage(str(path)), audit)
    assert victim.exists()
    assert dict(result.skipped.whys) == {"changed since the plan": 1}


def test_check_refuses_a_plan_whose_commit_log_changed(copy_of, tmp_path) -> None:
    path = copy_of("two_actions")
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(path, audit=audit)
    storage = Storage(str(path))
    assert check_plan(plan, storage).ok
    commit = path / "commits" / "2"
    commit.write_text(commit.read_text().replace("v2", "v2 ", 1))
    verdict = check_plan(plan, storage)
    assert not verdict.ok and "commits [2] changed" in verdict.message
    with pytest.raises(GcError, match="refused"):
        apply_unleased(plan, storage, audit)
    assert all((path / c.path).exists() for c in candidates_of(plan))


def test_check_accepts_a_commit_log_that_moved_on(copy_of) -> None:
    path = copy_of("two_actions")
    plan = plan_later(path)
    assert not check_plan(plan, Storage(str(path))).moved
    shutil.copy(path / "commits" / "4", path / "commits" / "5")
    shutil.copy(path / "offsets" / "4", path / "offsets" / "5")
    verdict = check_plan(plan, Storage(str(path)))
    assert verdict.ok and verdict.newest_commit == 5 and verdict.moved


def ckpt_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    ckpt = Path(sys.executable).parent / "ckpt"
    return subprocess.run([str(ckpt), *args], capture_output=True, text=True, env=env, timeout=300)


UNSAFE_NOW = [
    "--grace",
    "0",
    "--unsafe-short-grace",
    "--quiet-period",
    "0",
    "--unsafe-short-quiet-period",
    "--query-stopped",
]


def test_cli_gc_json_and_dry_run(copy_of) -> None:
    path = copy_of("two_actions")
    dry = ckpt_cli("gc", str(path), "--json", *UNSAFE_NOW)
    doc = json.loads(dry.stdout)
    assert dry.returncode == 0 and doc["applied"] is False and doc["deleted"] == 0
    assert doc["plan"]["files"] > 0 and set(doc["plan"]["by_reason"]) == {"superseded", "unreferenced_sst"}
    assert "candidates" not in doc["plan"]  # the document holds the totals, never every candidate
    streamed = ckpt_cli("gc", str(path), "--candidates", *UNSAFE_NOW)
    candidates = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert streamed.returncode == 0 and len(candidates) == doc["plan"]["files"]
    assert all(set(c) == {"path", "bytes", "reason"} for c in candidates)
    assert all((path / c["path"]).exists() for c in candidates)
    assert Path(doc["plan_file"]).exists() and "_ckpt_audit" in doc["plan_file"]
    assert not Path(doc["plan_file"]).is_relative_to(path)

    refused = ckpt_cli("gc", str(path), "--grace", "10m")
    assert refused.returncode == 2 and "below 15 minutes" in refused.stderr

    applied = json.loads(ckpt_cli("gc", str(path), "--json", "--apply", *UNSAFE_NOW).stdout)
    assert applied["applied"] and applied["deleted"] == doc["plan"]["files"] and not applied["failed"]
    again = ckpt_cli("gc", str(path), "--apply", *UNSAFE_NOW)
    assert again.returncode == 0 and "nothing to delete" in again.stdout


@pytest.mark.slow
def test_a_crash_in_the_middle_of_apply(spark, corpus_root, corpus, tmp_path) -> None:
    path = _copy(corpus, "two_actions", tmp_path / "crash")
    total = plan_later(path).files
    env = {**os.environ, CRASH_ENV: "cleanup.deleted:7"}
    crashed = ckpt_cli("gc", str(path), "--apply", "--json", "--batch-size", "5", "--lease-ttl", "5s",
                       *UNSAFE_NOW, env=env)  # fmt: skip
    assert crashed.returncode == -signal.SIGKILL
    left = plan_later(path).files
    assert left == total - 10  # two batches of five deleted, the second never recorded
    # The half-cleaned checkpoint still restarts, and the next run completes the plan once the
    # dead run's lease has expired (it refuses before then).
    held = ckpt_cli("gc", str(path), "--apply", *UNSAFE_NOW)
    assert held.returncode == 2 and "ckpt gc --apply" in held.stderr
    scenario_named("two_actions").restart(spark, corpus_root / "two_actions", path, tmp_path / "more-input")
    done = json.loads(ckpt_cli("gc", str(path), "--apply", "--json", "--wait", "60s", *UNSAFE_NOW).stdout)
    assert not done["failed"] and done["plan"]["files"] >= left
    assert ckpt_cli("validate", str(path)).returncode == 0


def test_bad_input_plans_nothing_and_deletes_nothing(copy_of, tmp_path) -> None:
    path = copy_of("two_actions")
    before = sorted(p for p in path.rglob("*"))
    (path / "commits" / "1").write_text("v2\n{broken")
    with pytest.raises(Exception, match="commits/1"):
        plan_later(path)
    (path / "commits" / "1").unlink()
    with pytest.raises(GcError, match="COMMIT_LOG_GAP"):
        plan_later(path)
    assert sorted(p for p in path.rglob("*") if p.name != "1") == [p for p in before if p.name != "1"]


def test_a_symlink_leading_outside_the_checkpoint(copy_of, tmp_path) -> None:
    path = copy_of("two_actions")
    outside = tmp_path / "precious"
    outside.mkdir()
    orphan = next(c for c in candidates_of(plan_later(path)) if c.path.endswith(".changelog"))
    target = outside / "data.changelog"
    shutil.move(path / orphan.path, target)
    (path / orphan.path).symlink_to(target)
    os.utime(path / orphan.path, (time.time() - 10 * 3600,) * 2, follow_symlinks=False)
    with pytest.raises(GcError, match="outside"):
        plan_later(path)
    assert target.exists()


def test_a_partition_folder_linked_from_outside_the_checkpoint(copy_of, tmp_path) -> None:
    """A partition folder that is a link to a folder outside is a file of the checkpoint that
    resolves outside it: the plan's strict read of the checkpoint refuses it, naming where it
    leads, and nothing is planned."""
    path = copy_of("two_actions")
    orphan = next(c for c in candidates_of(plan_later(path)) if c.path.endswith(".changelog"))
    folder = path / orphan.path.rsplit("/", 1)[0]
    elsewhere = tmp_path / "precious"
    shutil.move(folder, elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OutsideCheckpointError, match=f"resolves to {elsewhere}, outside the checkpoint"):
        plan_later(path)
    assert (elsewhere / orphan.path.rsplit("/", 1)[1]).exists()


def test_the_guard_resolves_each_folder_through_a_file_that_is_no_link(copy_of, tmp_path) -> None:
    """`state/<op>` is a link to a folder outside the checkpoint, and in each folder that holds
    candidates the first one is a link back inside. The guard resolves each link itself and each
    folder through a file of it that is no link, so the candidates are still refused. A plan never
    gets this far (a linked operator folder is no folder to it: its stores are missing), so this
    drives the guard, its last line of defence, with the real listing of each partition."""
    from checkpoint.cleanup.decide import _guard_paths
    from checkpoint.format.layout import classify
    from checkpoint.model.checkpoint import CheckpointFile, build_checkpoint

    path = copy_of("two_actions")
    planned = candidates_of(plan_later(path))
    firsts: dict[str, str] = {}  # folder -> its first candidate, in the order the guard sees them
    for c in planned:
        firsts.setdefault(c.path.rsplit("/", 1)[0], c.path)
    assert len(firsts) > 1 and len(planned) > len(firsts)
    op = planned[0].path.split("/")[1]
    elsewhere = tmp_path / "precious"
    shutil.move(path / "state" / op, elsewhere)
    (path / "state" / op).symlink_to(elsewhere, target_is_directory=True)
    inside = path / "state" / "inside"
    inside.write_bytes(b"")
    for rel in firsts.values():
        (path / rel).unlink()
        (path / rel).symlink_to(inside)
    storage = Storage(str(path))
    logs = tuple(CheckpointFile(i, classify(i.rel)) for i in storage.list_outside(["state"]))
    base = build_checkpoint(storage, logs)
    partitions = {c.path.rsplit("/", 1)[0].split("/")[2] for c in planned}
    listed = {f.rel: f for part in partitions for f in storage.list_files(f"state/{op}/{part}")}
    assert all(listed[rel].link for rel in firsts.values())
    with pytest.raises(GcError, match=f"resolves to {elsewhere}/.*outside the state/ folder"):
        _guard_paths(base, [CheckpointFile(listed[c.path], classify(c.path)) for c in planned])


def test_a_listing_that_fails_part_way(copy_of, monkeypatch) -> None:
    from checkpoint.errors import StorageError
    from checkpoint.storage import Storage

    path = copy_of("two_actions")

    pages = Storage.pages

    def broken(self, under="", page=1000):
        if not under.startswith("state/"):  # the logs list whole; a partition a page at a time
            yield from pages(self, under, page)
            return
        yield next(pages(self, under, 1))
        raise StorageError("listing failed: connection reset after 1 key", self.url)

    monkeypatch.setattr(Storage, "pages", broken)
    with pytest.raises(StorageError, match="connection reset"):
        plan_later(path)


def test_retained_zip_metadata_unreadable_stops_the_plan(copy_of) -> None:
    path = copy_of("two_actions")
    ckpt = load_checkpoint(str(path))
    plan_later(path)  # fine before
    from checkpoint.model.lineage import checkpoint_lineage

    base = next(e.base for e in checkpoint_lineage(ckpt) if e.base is not None)
    (path / base.rel).write_bytes(b"not a zip")
    with pytest.raises(GcError, match="metadata of retained zip"):
        plan_later(path)
    assert FileKind.ZIP == base.kind


def test_crcs_of_files_being_written_are_never_candidates(copy_of) -> None:
    """Spark writes `.<name>.<uuid>.tmp` (and Hadoop its `..<name>.<uuid>.tmp.crc`), then renames.

    Deleting that crc in between fails the commit (seen with a live query): it is not ours.
    """
    path = copy_of("two_actions")
    folder = path / "state" / "0" / "0"
    temp = ".9_83f71141-5fc2-4c14-8508-70d55d699b3e.changelog.crc.202a45c4-69a1-4552-ae56-c7c115e4266c.tmp"
    (folder / f".{temp}.crc").write_bytes(b"crc")  # its main file is already renamed away
    (folder / ".orphan-notes.txt.crc").write_bytes(b"crc")
    old = time.time() - 10 * 3600
    for name in (f".{temp}.crc", ".orphan-notes.txt.crc"):
        os.utime(folder / name, (old, old))
    plan = plan_later(path)
    assert not any(c.path.endswith(".tmp.crc") or "orphan-notes" in c.path for c in candidates_of(plan))
    assert plan.kept["sidecar_of_a_file_not_ours"] >= 2


def test_a_temp_file_left_by_a_crashed_compaction_is_cleaned(copy_of) -> None:
    path = copy_of("long_chain")
    temp = path / "state" / "0" / "1" / ".ckpt-maint-32_83f71141-5fc2-4c14-8508-70d55d699b3e.zip.0a1b2c.tmp"
    temp.write_bytes(b"half a zip")
    old = time.time() - 10 * 3600
    os.utime(temp, (old, old))
    plan = plan_later(path, quiet_seconds=0)
    assert [(c.path, c.reason) for c in candidates_of(plan)] == [
        (temp.relative_to(path).as_posix(), "abandoned_temp")
    ]


def test_the_manifest_lists_zips_before_ssts_and_each_sidecar_after_its_main(copy_of) -> None:
    """The apply deletes in manifest order, so a crash part-way never leaves a zip whose SSTs are
    gone, nor a main file whose sidecar is. Per partition: zips, changelogs, SSTs, Spark's
    sidecars, Hadoop's, then temp files, each kind by path; partitions one block each."""
    path = copy_of("two_actions")
    temp = path / "state" / "0" / "0" / ".ckpt-maint-9_83f71141-5fc2-4c14-8508-70d55d699b3e.zip.0a1b2c.tmp"
    temp.write_bytes(b"half a zip")
    old = time.time() - 10 * 3600
    os.utime(temp, (old, old))
    order = [FileKind.ZIP, FileKind.CHANGELOG, FileKind.SST, FileKind.SPARK_CRC, FileKind.HADOOP_CRC,
             FileKind.MAINT_TEMP]  # fmt: skip
    planned = [c.path for c in candidates_of(plan_later(path))]
    blocks: dict[str, list[str]] = {}
    for rel in planned:
        folder = "/".join(rel.split("/")[:3])
        if folder in blocks:
            assert folder == next(reversed(blocks)), f"{folder} comes back after another partition"
        blocks.setdefault(folder, []).append(rel)
    for rels in blocks.values():
        keys = [(order.index(classify(rel).kind), rel) for rel in rels]
        assert keys == sorted(keys)
    position = {rel: i for i, rel in enumerate(planned)}
    sidecars = [rel for rel in planned if classify(rel).main in position]
    assert all(position[str(classify(rel).main)] < position[rel] for rel in sidecars)
    kinds = {classify(rel).kind for rel in planned}
    assert kinds == set(order) and len(blocks) > 1 and len(sidecars) > len(planned) / 2


def test_workers_are_forked_only_from_a_process_without_other_threads(copy_of, tmp_path) -> None:
    """A forked worker starts at once, the context in its memory; but a fork copies only the
    calling thread, so next to any other thread workers are spawned. Either way the manifest is
    the same bytes as a plan made in one process."""
    path, now = copy_of("two_actions"), time.time() + LATER

    here = plan_of(path, AuditTrail(str(tmp_path / "here")), now=now, workers=0)
    assert here.files > 0
    for with_thread, method in ((False, "fork"), (True, "spawn")):
        out = planned_in_a_fresh_process(path, tmp_path / method, now, with_thread=with_thread, workers=2)
        assert out["started"] == [method]
        assert manifest_lines(out["manifest"], out["plan_id"]) == manifest_lines(here.manifest, here.plan_id)


def test_an_idle_running_query_keeps_the_sst_a_future_snapshot_may_reuse(copy_of) -> None:
    """A query with no input for longer than the quiet period looks stopped by its logs. Its
    executor may still reuse an SST it uploaded for a snapshot not uploaded yet (SPARK-55892): an
    SST that no zip lists, newer than every SST a retained zip lists. Cleanup keeps it unless the
    caller says the query is stopped (`--query-stopped`, a root's `queries_stopped`)."""
    import uuid

    from testbed.clock import date_back

    path = copy_of("snapshots")
    sst = next(path.glob("state/0/0/SSTs/*.sst"))
    pending = sst.with_name(f"999999-{uuid.uuid4()}.sst")  # uploaded, its snapshot not yet
    pending.write_bytes(sst.read_bytes())
    date_back(path, 8 * 3600)  # past the grace and the quiet period: an idle query
    rel = pending.relative_to(path).as_posix()
    idle = plan_of(path, query_stopped=False)
    assert idle.live and rel not in {c.path for c in candidates_of(idle)}
    assert idle.kept.get("live_query_sst_newer_than_retained", 0) >= 1
    stopped = plan_of(path)  # the corpus' queries are stopped, and the helper says so
    assert not stopped.live
    assert "unreferenced_sst" in {c.reason for c in candidates_of(stopped) if c.path == rel}
    cli = ckpt_cli("gc", str(path), "--json")
    assert cli.returncode == 0 and json.loads(cli.stdout)["plan"]["live"] is True
