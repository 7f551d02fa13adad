"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`): read as healthy, their replay chains what Spark's recovery
replays, their damage found and named; forked at a batch and restarted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from checkpoint.analysis.checks import Severity, ValidationOptions, validate
from checkpoint.format import states
from checkpoint.format.layout import FileKind, classify
from checkpoint.format.providers import Provider
from checkpoint.model.checkpoint import Scope, load_checkpoint
from checkpoint.model.head import load_head
from checkpoint.model.lineage import checkpoint_lineage
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from tests.support.cli import ckpt
from tests.support.damage import remove

HDFS = ("hdfs_agg", "hdfs_deltas", "hdfs_dedup", "hdfs_dedup_watermark", "hdfs_join", "hdfs_window",
        "hdfs_session", "hdfs_pandas", "hdfs_retry", "hdfs_killed_before_restart",
        "hdfs_killed_after_restart")  # fmt: skip
ROCKSDB_V1 = ("rocksdb_v1", "rocksdb_v1_changelog")


def test_the_corpus_holds_every_default_format(defaults) -> None:
    operators = (
        "rocksdb_v1_session",
        "rocksdb_v1_dedup",
        "rocksdb_v1_join",
        "rocksdb_v1_window",
        "rocksdb_v1_pandas",
        "rocksdb_v1_list_state",
        "rocksdb_v1_every_state",
        "rocksdb_v1_timers",
    )
    assert sorted(defaults) == sorted((*HDFS, *ROCKSDB_V1, *operators))
    for name, path in defaults.items():
        ckpt_ = load_checkpoint(str(path))
        assert ckpt_.format_version == 1, name
        assert ckpt_.provider == (Provider.HDFS if name.startswith("hdfs") else Provider.ROCKSDB), name
        assert ckpt_.states is (states.HDFS if name.startswith("hdfs") else states.ROCKSDB_V1), name
    kinds = {name: load_checkpoint(str(path)).count_by_kind() for name, path in defaults.items()}
    assert kinds["hdfs_agg"]["snapshot"] > 0 and "snapshot" not in kinds["hdfs_deltas"]  # Spark's own
    assert "changelog" not in kinds["rocksdb_v1"] and kinds["rocksdb_v1_changelog"]["changelog"] > 0


@pytest.mark.parametrize("deep", [False, True])
def test_a_healthy_default_checkpoint_has_no_error_and_no_unknown_file(defaults, deep) -> None:
    for name, path in defaults.items():
        full = load_checkpoint(str(path), strict=False)
        assert "unknown" not in full.count_by_kind(), name
        findings = validate(full, ValidationOptions(deep=deep)).findings
        assert [f for f in findings if f.severity == Severity.ERROR] == [], name
        # The one warning: a delta-only chain of 12, past the threshold of 10.
        assert {f.code for f in findings} <= ({"LONG_REPLAY_CHAIN"} if name == "hdfs_deltas" else set()), name


def _chain_from_names(store: Path, version: int, base_ext: str, step_ext: str) -> tuple[int, list[int]]:
    """What Spark's recovery of `version` reads, from the folder's names alone: the newest base at
    or below it, then every step after."""
    names = os.listdir(store)
    bases = [int(n.split(".")[0]) for n in names if n.endswith(f".{base_ext}") and not n.startswith(".")]
    base = max((v for v in bases if v <= version), default=0)
    return base, list(range(base + 1, version + 1))


def test_the_chain_is_what_recovery_replays_by_the_file_names(defaults) -> None:
    for name, path in defaults.items():
        ckpt_ = load_checkpoint(str(path))
        exts = ("snapshot", "delta") if ckpt_.provider == Provider.HDFS else ("zip", "changelog")
        for entry in checkpoint_lineage(ckpt_):
            folder = path / "state" / str(entry.store.operator) / str(entry.store.partition)
            folder = folder if entry.store.store == "default" else folder / entry.store.store
            base, steps = _chain_from_names(folder, entry.version, *exts)
            assert (entry.snapshot_version, [f.what.version for f in entry.chain]) == (base, steps), (
                name,
                entry,
            )
            assert entry.loadable and all(f.kind.value == exts[1] for f in entry.chain), name


def test_head_first_reads_what_recovery_reads_and_agrees_with_the_listing(defaults) -> None:
    for name, path in defaults.items():
        full = load_checkpoint(str(path), strict=False)
        head = load_head(str(path), strict=False, recent=2)
        assert head.scope == Scope.RECOVERY and len(head.files) < len(full.files), name
        for deep in (False, True):
            got, want = (validate(c, ValidationOptions(deep=deep)) for c in (head, full))
            assert sorted(f.as_dict().items() for f in got.findings) == sorted(
                f.as_dict().items() for f in want.findings
            ), name
            assert [e.as_dict() for e in got.lineage] == [e.as_dict() for e in want.lineage], name
        calls = head.storage.calls.snapshot()
        assert calls["list"] == 0, (name, calls)


def _requests(path: Path) -> dict[str, int]:
    storage = Storage(str(path))
    validate(load_head(storage, strict=False))
    return dict(storage.calls.snapshot())


@pytest.mark.parametrize("name", ["hdfs_agg", "rocksdb_v1_changelog"])
def test_head_first_requests_do_not_grow_with_history(defaults, tmp_path, name) -> None:
    """Two checkpoints that differ only in history (the state files below each store's base, as
    Spark's retention deletes them) cost the same requests to read and validate."""
    pruned = tmp_path / "pruned"
    copy_checkpoint(defaults[name], pruned)
    ckpt_ = load_checkpoint(str(pruned))
    for entry in checkpoint_lineage(ckpt_):
        assert entry.base is not None, entry
        for f in ckpt_.stores[entry.store].files:
            if f.what.version is not None and f.what.version < entry.base.what.version:
                remove(pruned / f.rel)
    assert len(load_checkpoint(str(pruned)).files) < len(ckpt_.files)
    assert _requests(defaults[name]) == _requests(pruned)


def _copy(defaults, name: str, tmp_path: Path) -> Path:
    path = tmp_path / name
    copy_checkpoint(defaults[name], path)
    return path


def _codes(path: Path, deep: bool = False) -> dict[str, list[str]]:
    findings = validate(load_checkpoint(str(path), strict=False), ValidationOptions(deep=deep)).findings
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(f.code, []).append(f.message)
    return out


def test_a_delta_missing_inside_the_chain_breaks_it_by_name(defaults, tmp_path) -> None:
    path = _copy(defaults, "hdfs_agg", tmp_path)
    # Spark's maintenance snapshots on a timer, so chains differ run to run: one of at least two deltas.
    entry = next(e for e in checkpoint_lineage(load_checkpoint(str(path))) if len(e.chain) >= 2)
    victim = entry.chain[0]
    remove(path / victim.rel)
    codes = _codes(path)
    assert codes["REPLAY_CHAIN_BROKEN"] == [
        f"{victim.what.version}.delta is missing from the replay chain of version {entry.version}"
    ]
    result = ckpt("validate", str(path))
    assert result.returncode == 1 and f"{victim.what.version}.delta" in result.stdout


def test_a_missing_snapshot_falls_back_to_the_deltas_as_spark_does(defaults, tmp_path) -> None:
    """Recovery takes the newest snapshot there is: without it, an older one (or version 1) and
    more deltas. Nothing is broken while the deltas are there."""
    path = _copy(defaults, "hdfs_agg", tmp_path)
    entry = checkpoint_lineage(load_checkpoint(str(path)))[0]
    remove(path / entry.base.rel)
    after = next(e for e in checkpoint_lineage(load_checkpoint(str(path))) if e.store == entry.store)
    assert after.snapshot_version < entry.snapshot_version and after.loadable
    assert after.chain_length == entry.chain_length + entry.snapshot_version - after.snapshot_version
    assert "REPLAY_CHAIN_BROKEN" not in _codes(path)


@pytest.mark.parametrize("kind", [FileKind.SNAPSHOT, FileKind.DELTA])
def test_an_unreadable_snapshot_or_delta_is_named(defaults, tmp_path, kind) -> None:
    path = _copy(defaults, "hdfs_agg", tmp_path)
    entry = checkpoint_lineage(load_checkpoint(str(path)))[0]
    victim = path / (entry.base.rel if kind == FileKind.SNAPSHOT else entry.chain[-1].rel)
    code = "SNAPSHOT_UNREADABLE" if kind == FileKind.SNAPSHOT else "DELTA_UNREADABLE"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])  # cut short: the LZ4 stream ends inside a block
    assert code not in _codes(path)  # the size is not zero: only a read tells
    assert code in _codes(path, deep=True)
    victim.write_bytes(b"")
    version = int(victim.name.split(".")[0])
    assert _codes(path)[code] == [f"an empty file: Spark cannot read version {version} of the store"]


def test_a_zip_whose_sst_is_missing_is_named(defaults, tmp_path) -> None:
    path = _copy(defaults, "rocksdb_v1", tmp_path)
    ckpt_ = load_checkpoint(str(path))
    entry = checkpoint_lineage(ckpt_)[0]
    listed = ckpt_.read_snapshot(entry.base).metadata.sst_files[0].dfs_name
    remove((path / entry.base.rel).parent / "SSTs" / listed)
    assert _codes(path)["SST_MISSING"] == [f"listed by {entry.base.rel.rsplit('/', 1)[1]} but missing"]


def test_every_read_command_calls_a_default_checkpoint_healthy(defaults) -> None:
    path = defaults["hdfs_agg"]
    assert ckpt("validate", str(path)).returncode == 0
    doc = json.loads(ckpt("inspect", str(path), "--json").stdout)
    assert (doc["format_version"], doc["provider"]) == (1, "hdfs") and "unknown" not in doc["files"]
    lineage = json.loads(ckpt("lineage", str(path), "--json").stdout)["stores"]
    for s in lineage:  # Spark's own snapshots, wherever its timed maintenance wrote them
        base, steps = _chain_from_names(path / f"state/0/{s['partition']}", s["version"], "snapshot", "delta")
        assert (s["snapshot_version"], s["chain_length"]) == (base, len(steps)) and base > 0, s
    scan = json.loads(ckpt("scan", str(path.parent), "--json").stdout)["checkpoints"]
    assert [(c["state_format"], c["health"]) for c in scan] == [("hdfs V1", "ok")]
    fleet = json.loads(ckpt("fleet", str(path.parent), "--json").stdout)["checkpoints"]
    assert [(r["state_format"], r["errors"]) for r in fleet] == [("hdfs V1", [])]


def test_spark_temp_files_are_told_apart() -> None:
    uid = "0a1b2c3d-0000-4000-8000-000000000000"
    assert classify(f"state/0/1/.7.delta.{uid}.TID12.tmp").kind == FileKind.SPARK_TEMP
    assert classify(f"commits/.7.{uid}.tmp").kind == FileKind.SPARK_TEMP
    assert classify(f"state/0/1/7_{uid}.delta").kind == FileKind.UNKNOWN  # the HDFS-backed store has no ids
    assert classify(f"elsewhere/.7.{uid}.tmp").kind == FileKind.UNKNOWN


V1_SESSION = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "1"}  # the state reader's


@pytest.mark.parametrize("name", ["hdfs_agg", "hdfs_dedup", "rocksdb_v1_changelog"])
def test_spark_reads_the_computed_chain_and_nothing_else(spark, defaults, tmp_path, name) -> None:
    """Spark's state data source loads the same rows from a copy that holds only the computed base
    and chain of every store, and fails once one file of a chain is gone."""
    from jobs.spark_session import scoped_confs
    from tests.support.state import StateUnreadable, read_state

    path = _copy(defaults, name, tmp_path)
    ckpt_ = load_checkpoint(str(path))
    batch = ckpt_.latest_committed_batch
    lineage = checkpoint_lineage(ckpt_)
    needed = {f.rel for e in lineage for f in (e.base, *e.chain) if f is not None}
    with scoped_confs(spark, V1_SESSION):
        before = read_state(spark, path, batch, name)
        pruned = _copy(defaults, name, tmp_path / "pruned")
        state_kinds = {FileKind.ZIP, FileKind.CHANGELOG, FileKind.DELTA, FileKind.SNAPSHOT}
        gone = [f.rel for f in ckpt_.files if f.kind in state_kinds and f.rel not in needed]
        for rel in gone:
            remove(pruned / rel)
        assert gone and before and read_state(spark, pruned, batch, name) == before
        entry = next(e for e in lineage if e.chain)
        broken = _copy(defaults, name, tmp_path / "broken")
        remove(broken / entry.chain[0].rel)
        with pytest.raises(StateUnreadable):
            read_state(spark, broken, batch, name)


FORKED = {"hdfs_agg": 15, "hdfs_join": 3, "rocksdb_v1": 5, "rocksdb_v1_changelog": 15}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FORKED))
def test_a_fork_at_an_earlier_batch_restarts_alone_like_the_original(spark, defaults, tmp_path, name) -> None:
    """Exactly what recovery at the batch reads, checked as Spark reads it (V1 has no sidecars);
    with its source deleted, the fork replays the later batches one by one and ends in the state
    of an untouched copy restarted with the same input."""
    from jobs.spark_session import scoped_confs
    from testbed.defaults import scenario_named
    from testbed.recovery import recovery_files
    from tests.support.files import files_of
    from tests.support.state import restart_like_untouched

    batch = FORKED[name]
    src, untouched, dest = tmp_path / "src", tmp_path / "untouched", tmp_path / "dest"
    copy_checkpoint(defaults[name], src)
    copy_checkpoint(defaults[name], untouched)
    out = ckpt(
        "fork", str(src), str(dest), "--batch", str(batch), "--audit", str(tmp_path / "audit"), "--json"
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    expected = set(recovery_files(src, batch))
    assert files_of(dest).keys() == expected | {"_ckpt_fork.json", "_ckpt_fork.complete.json"}
    assert (doc["files"], doc["batch"]) == (len(expected), batch)
    assert ckpt("validate", str(dest)).returncode == 0
    shutil.rmtree(src)
    scenario = scenario_named(name)
    with scoped_confs(spark, V1_SESSION):
        final = restart_like_untouched(
            spark, scenario, defaults[name].parent, dest, untouched, tmp_path / "more", max_files=1
        )
    assert final == scenario.batches


# Chains of at least 3 with and without a base: Spark's snapshots at 22 leave hdfs_agg a chain of 3,
# hdfs_join and hdfs_session have none (the join's four stores, the session window's prefix-scanned
# map), and rocksdb_v1_changelog replays 5 changelogs onto its zip at 20. hdfs_deltas (no base) is
# compacted by the CLI in the checksum tests below and on S3 (tests/checkpoint/storage/test_s3.py).
COMPACTED = ("hdfs_agg", "hdfs_join", "hdfs_session", "rocksdb_v1_changelog")
HDFS_NAMES, ROCKSDB_NAMES = "snapshot", "zip"


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPACTED)
def test_compaction_writes_the_snapshot_spark_would_and_the_query_restarts_like_untouched(
    spark, defaults, tmp_path, name
) -> None:
    """Every store of the stopped query gets the snapshot of its latest committed version
    (`<v>.snapshot` by Spark's own provider, `<v>.zip` by the rebuild), under Spark's V1 name and
    nothing else new; Spark's reader loads the same state from that snapshot alone, with the chain
    before it gone; and the restarted query ends in the state of an untouched copy."""
    from checkpoint.compaction.targets import plan_compaction
    from jobs.compact import run_compaction
    from jobs.spark_session import scoped_confs
    from testbed.defaults import scenario_named
    from testbed.demo import date_back
    from tests.support.files import files_of
    from tests.support.state import read_state, restart_like_untouched

    compacted, untouched = _copy(defaults, name, tmp_path / "c"), _copy(defaults, name, tmp_path / "u")
    date_back(compacted, 2 * 3600)  # stopped for longer than the quiet period
    before_files = files_of(compacted)
    latest = load_checkpoint(str(compacted)).latest_committed_batch
    entries = checkpoint_lineage(load_checkpoint(str(compacted)), latest)
    # In this session's Spark: `ckpt compact` itself runs in the checksum and leftover tests.
    ckpt_ = load_head(str(compacted), recent=2)
    outcomes = run_compaction(spark, ckpt_, plan_compaction(ckpt_, min_chain=1)[0])
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    base = HDFS_NAMES if name.startswith("hdfs") else ROCKSDB_NAMES
    published = {Path(o.rebuilt.path).relative_to(compacted).as_posix() for o in outcomes if o.rebuilt}
    # Spark's timed maintenance may have snapshotted a store's latest version already: no chain there.
    planned = [e for e in entries if e.chain_length]
    assert planned and published == {
        f"{e.committed_file.rel.rsplit('/', 1)[0]}/{e.version}.{base}" for e in planned
    }
    assert len(published) == len(planned)
    new = files_of(compacted).keys() - before_files.keys()
    assert {n for n in new if not n.endswith(".sst")} == published  # no sidecar, no temp file left
    after = checkpoint_lineage(load_checkpoint(str(compacted)), latest)
    assert {e.chain_length for e in after} == {0}
    with scoped_confs(spark, V1_SESSION):
        expected = read_state(spark, untouched, latest, name)
        assert read_state(spark, compacted, latest, name) == expected
        alone = _copy({name: compacted}, name, tmp_path / "alone")
        for f in (f for e in entries for f in (e.base, *e.chain) if f is not None):
            remove(alone / f.rel)
        assert read_state(spark, alone, latest, name) == expected
        final = restart_like_untouched(
            spark, scenario_named(name), defaults[name].parent, compacted, untouched, tmp_path / "more"
        )
    assert final > latest


def test_v1_compaction_refuses_a_query_that_is_not_stopped_and_writes_nothing(defaults, tmp_path) -> None:
    """V1 names carry no attempt id: a recent commit or an unfinished batch refuses, exit 2."""
    from testbed.demo import date_back
    from tests.support.files import files_of

    recent = _copy(defaults, "hdfs_deltas", tmp_path)
    (recent / "commits" / "11").touch()
    unfinished = _copy(defaults, "hdfs_killed_before_restart", tmp_path)
    date_back(unfinished, 2 * 3600)
    for path, why in ((recent, "quiet period"), (unfinished, "is planned and not committed")):
        before = files_of(path)
        out = ckpt("compact", str(path), "--min-chain", "3")
        assert out.returncode == 2 and why in out.stderr and "Nothing was written" in out.stderr, out.stderr
        assert files_of(path) == before


@pytest.mark.slow
def test_a_leftover_hadoop_checksum_fails_its_store_alone(defaults, tmp_path) -> None:
    """A stale `.<v>.snapshot.crc` would fail every read of the new snapshot: that store is not
    compacted and says why; the others are."""
    from testbed.demo import date_back

    path = _copy(defaults, "hdfs_deltas", tmp_path)
    date_back(path, 2 * 3600)
    (path / "state/0/1/.12.snapshot.crc").write_bytes(b"stale")
    out = ckpt("compact", str(path), "--min-chain", "3", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and len(doc["materialized"]) == 3
    (failed,) = doc["failed"]
    assert failed["partition"] == 1 and ".12.snapshot.crc already exist" in failed["error"], failed
    assert not (path / "state/0/1/12.snapshot").exists()


def test_hadoops_checksum_of_sparks_sidecar_takes_the_snapshots_name_too(defaults, tmp_path) -> None:
    """A stale `.<v>.snapshot.crc.crc` would fail every read of the new snapshot's Spark sidecar."""
    from checkpoint.compaction.hdfs import taken_names

    path = _copy(defaults, "hdfs_deltas", tmp_path)
    (path / "state/0/1/.12.snapshot.crc.crc").write_bytes(b"stale")
    ckpt = load_checkpoint(str(path))
    assert taken_names(ckpt, "state/0/1", 12) == [".12.snapshot.crc.crc"]
    assert taken_names(ckpt, "state/0/0", 12) == []


@pytest.mark.slow
def test_a_delta_that_fails_hadoops_checksum_fails_its_store_alone(defaults, tmp_path) -> None:
    """One byte of a delta's LZ4 end mark changed, its length kept: neither validation nor Spark's
    own load sees it (Spark's reader returns the state), Hadoop's checksum of the copy does; that
    store gets no snapshot, the others do."""
    from testbed.demo import date_back

    path = _copy(defaults, "hdfs_deltas", tmp_path)
    date_back(path, 2 * 3600)
    victim = path / "state/0/2/5.delta"
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x01
    victim.write_bytes(bytes(data))
    date_back(path, 2 * 3600)
    out = ckpt("compact", str(path), "--min-chain", "3", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and len(doc["materialized"]) == 3, out.stderr
    (failed,) = doc["failed"]
    assert failed["partition"] == 2 and "Hadoop checksum mismatch" in failed["error"], failed
    assert not (path / "state/0/2/12.snapshot").exists()


def test_a_v1_file_that_fails_its_read_stops_the_fork_before_any_log(defaults, tmp_path) -> None:
    """No sidecar to compare with: the copy is decoded as Spark's load decodes it, and a damaged
    delta stops the fork in its first step, DEST marked incomplete, no offset or commit written."""
    src = _copy(defaults, "hdfs_agg", tmp_path)
    victim = src / checkpoint_lineage(load_checkpoint(str(src)))[0].chain[0].rel
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    dest = tmp_path / "dest"
    out = ckpt("fork", str(src), str(dest), "--audit", str(tmp_path / "audit"))
    assert out.returncode == 1 and "incomplete" in out.stderr, out.stderr
    assert not (dest / "offsets").exists() and not (dest / "commits").exists()
    refused = ckpt("validate", str(dest))
    assert refused.returncode != 0 and "an interrupted fork, not a checkpoint yet" in refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ROCKSDB_V1)
def test_rocksdb_v1_is_repartitioned_by_spark_and_restarts_like_an_untouched_copy(
    spark, defaults, tmp_path, name
) -> None:
    """Spark's repartitioner reads and writes RocksDB format V1 in a V1 session: 4 to 8 partitions,
    proven by the digests before and after, and by the real query restarted beside an untouched
    copy (the same output, the same state, compared without the partition a row sits in)."""
    from tests.checkpoint.repartition.test_repartition import _run, assert_restarts_like_untouched

    changed, untouched = _copy(defaults, name, tmp_path / "c"), _copy(defaults, name, tmp_path / "u")
    result = _run(spark, changed, 8)
    assert (result.from_partitions, result.to_partitions) == (4, 8)
    assert result.stores and all(s.rows > 0 and s.digest_before == s.digest_after for s in result.stores)
    after = load_head(str(changed))
    assert after.format_version == 1 and after.provider == Provider.ROCKSDB
    assert ckpt("validate", str(changed)).returncode == 0
    assert_restarts_like_untouched(spark, name, defaults[name].parent, changed, untouched, tmp_path)


def test_repartition_refuses_the_hdfs_backed_store_by_name(defaults, tmp_path) -> None:
    path = _copy(defaults, "hdfs_agg", tmp_path)
    out = ckpt("repartition", str(path), "--partitions", "8", "--audit", str(tmp_path / "audit"))
    assert out.returncode == 2 and "UNSUPPORTED_PROVIDER" in out.stderr and out.stderr.count("\n") == 1
    assert not (tmp_path / "audit" / "repartitions").exists()


LATER = 7 * 3600  # the test clock: every file of the corpus past the default 6 h grace


def _plan(path: Path, **kwargs):
    import time

    from tests.support.planning import plan_of

    return plan_of(path, now=time.time() + LATER, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hdfs_agg", "hdfs_dedup", "rocksdb_v1", "rocksdb_v1_changelog"])
def test_cleanup_keeps_what_recovery_reads_and_the_query_restarts_like_untouched(
    spark, defaults, tmp_path, name
) -> None:
    """What Spark's maintenance would have removed had the query kept running (and orphan SSTs)
    goes; the last two batches read the same state, and the restarted query ends in the state of
    an untouched copy restarted with the same input."""
    from checkpoint.cleanup.apply import apply_plan
    from checkpoint.cleanup.audit import AuditTrail
    from jobs.spark_session import scoped_confs
    from testbed.defaults import scenario_named
    from tests.support.state import read_state, restart_like_untouched

    cleaned, untouched = _copy(defaults, name, tmp_path / "cleaned"), _copy(defaults, name, tmp_path / "kept")
    ckpt_ = load_checkpoint(str(cleaned))
    window = sorted(b.id for b in ckpt_.batches.values() if b.committed)[-2:]
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = _plan(cleaned, audit=audit, retain_batches=2)
    with scoped_confs(spark, V1_SESSION):
        before = {b: read_state(spark, cleaned, b, name) for b in window}
        result = apply_plan(plan, ckpt_.storage, audit)
        assert plan.files > 0 and not result.failed.files and result.deleted.files == plan.files
        assert {b: read_state(spark, cleaned, b, name) for b in window} == before
        assert _plan(cleaned, retain_batches=2).files == 0  # a second run plans nothing
        assert ckpt("validate", str(cleaned)).returncode == 0
        final = restart_like_untouched(
            spark, scenario_named(name), defaults[name].parent, cleaned, untouched, tmp_path / "more"
        )
    assert final > window[-1]


def test_cleanup_rules_for_the_default_formats(defaults, tmp_path) -> None:
    """Nothing a retained batch reads goes, each Hadoop .crc follows its file, Spark's temp file of
    a killed write goes once past the grace period, and a live query keeps two versions of margin."""
    from testbed.demo import date_back
    from tests.support.planning import candidates_of

    path = _copy(defaults, "hdfs_agg", tmp_path)
    date_back(path, 86_400)  # the query's files a day old; the temp file below is written now
    folder = path / "state" / "0" / "1"
    uid = "0a1b2c3d-0000-4000-8000-000000000000"
    (folder / f".26.delta.{uid}.TID9.tmp").write_bytes(b"half a delta")
    (folder / f"..26.delta.{uid}.TID9.tmp.crc").write_bytes(b"crc")
    plan = _plan(path, retain_batches=3)
    chosen = {c.path: c.reason for c in candidates_of(plan)}
    ckpt_ = load_checkpoint(str(path))
    for batch in (22, 23, 24):
        for entry in checkpoint_lineage(ckpt_, batch):
            for f in (entry.base, *entry.chain):
                assert f is None or f.rel not in chosen, (batch, f)
    assert chosen[f"state/0/1/.26.delta.{uid}.TID9.tmp"] == "killed_write"
    assert chosen[f"state/0/1/..26.delta.{uid}.TID9.tmp.crc"] == "killed_write"
    mains = {p for p in chosen if not p.rsplit("/", 1)[1].startswith(".")}
    hidden = {p for p in chosen if p.rsplit("/", 1)[1].startswith(".") and p.endswith(".crc")}
    assert {classify(p).main for p in hidden} - mains == {f"state/0/1/.26.delta.{uid}.TID9.tmp"}
    # Spark's timed maintenance decides where its snapshots are: the ones below the oldest retained
    # base (at least Spark's first, after 10 deltas) go.
    kept = next(e for e in checkpoint_lineage(ckpt_, 22) if e.store.partition == 1).base
    older = {f"state/0/1/{p.name}" for p in folder.glob("*.snapshot") if int(p.stem) < kept.what.version}
    assert older and older <= set(chosen) and kept.rel not in chosen
    import time

    from tests.support.planning import plan_of

    now = {c.path for c in candidates_of(plan_of(path, now=time.time(), retain_batches=3))}
    assert older <= now and f"state/0/1/.26.delta.{uid}.TID9.tmp" not in now  # in progress?
    live = _plan(path, retain_batches=1, query_stopped=False, quiet_seconds=LATER + 3600)
    assert live.live
    going = {c.path for c in candidates_of(live)}
    assert going and not {p for p in going if (classify(p).version or 0) >= 24}  # two versions of margin
    assert live.kept["live_query_temp_file"] == 1  # a running query may be writing it: no age tells


def test_the_provider_comes_from_the_offset_log_and_format_v2_is_rocksdb(defaults, tmp_path) -> None:
    """An offset file that names no provider predates the pin: Spark's default then, the
    HDFS-backed store, but never for format V2, which only RocksDB writes."""
    from testbed import synthetic

    v2 = tmp_path / "v2"
    synthetic.build(v2, 1, 12, window=4)  # offsets with an empty conf, format V2 ids
    assert load_head(str(v2)).provider == Provider.ROCKSDB
    assert validate(load_head(str(v2), strict=False)).ok
    hdfs = _copy(defaults, "hdfs_agg", tmp_path)
    for offsets in (hdfs / "offsets").glob("[0-9]*"):
        offsets.write_text(offsets.read_text().replace("HDFSBackedStateStoreProvider", "Unpinned"))
        text = offsets.read_text()
        offsets.write_text(text.replace('"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.'
                                        'execution.streaming.state.Unpinned",', ""))  # fmt: skip
    ckpt_ = load_checkpoint(str(hdfs))
    assert ckpt_.provider_class is None and ckpt_.provider == Provider.HDFS


def test_an_operator_without_its_metadata_is_an_error_and_no_action_touches_the_checkpoint(
    defaults, tmp_path
) -> None:
    """A checkpoint last run before Spark 4.0 has no operator metadata, from which every store's
    files are named: read as it was, its whole state was invisible, so a cleanup planned every
    state file away (the retained chains included) and a fork copied none. Now validation names
    it, and cleanup, fork, compaction and migration refuse with the remedy, nothing changed."""
    from tests.support.files import files_of

    path = _copy(defaults, "hdfs_agg", tmp_path)
    (path / "state/0/_metadata/metadata").unlink()
    before = files_of(path)
    assert "OPERATOR_METADATA_MISSING" in _codes(path)
    for args in (
        ["gc", str(path), "--retain-batches", "2", "--apply"],
        ["fork", str(path), str(tmp_path / "f")],
        ["compact", str(path)],
        ["migrate", str(path), str(tmp_path / "m"), "--quiet-period", "0s"],
    ):
        out = ckpt(*args)
        assert out.returncode == 2 and "run the query once on Spark 4.x" in out.stderr, (args, out.stderr)
    assert files_of(path) == before and not (tmp_path / "f").exists() and not (tmp_path / "m").exists()
