"""`ckpt migrate`: checkpoints in Spark's default formats (the HDFS-backed store, RocksDB format
V1) carried to RocksDB format V2 with their state, proven by the real query restarted on the
destination beside an untouched copy of the source restarted with the same input."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from checkpoint.format.providers import Provider
from checkpoint.model.head import load_head
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from tests.support.cli import ckpt
from tests.support.files import files_of
from tests.support.leases import lapse_leases
from tests.support.migrating import V2_SESSION, migrate, restarted_differently, stopped

NAMED_V2 = re.compile(r"^\d+_[0-9a-f-]{36}\.(zip|changelog)$")
# Every operator the issue names, on the HDFS-backed store and on RocksDB V1: aggregation (RocksDB
# with and without changelogs), dedup then aggregation, stream-stream join, windowed aggregation,
# session windows, applyInPandasWithState.
OPERATORS = ("agg", "dedup", "join", "window", "session", "pandas")
MIGRATED = (*(f"hdfs_{o}" for o in OPERATORS), "rocksdb_v1", "rocksdb_v1_changelog",
            *(f"rocksdb_v1_{o}" for o in OPERATORS[1:]),
            *(f"rocksdb_v1_{o}" for o in ("list_state", "every_state", "timers")))  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", MIGRATED)
def test_a_migrated_checkpoint_restarts_on_rocksdb_v2_like_its_source(
    spark, defaults, tmp_path, name
) -> None:
    """DEST validates as RocksDB V2 with no finding; restarted with one more input file, the real
    query emits what the untouched source emits and ends in the same state (Spark's reader, each in
    its own format), writing `<v>_<id>` files; SRC's bytes never change."""
    _migrates_and_restarts(spark, defaults, name, tmp_path)


@pytest.mark.slow
def test_a_join_in_state_format_3_on_format_v1_migrates_and_restarts_like_its_source(spark, tmp_path) -> None:
    """The join state format that keeps its four stores as column families of one, as Spark writes
    it in checkpoint format V1 (the operator corpus's `join_cf_v1`)."""
    from testbed.operators import ensure_operator_corpus

    name = "join_cf_v1"
    _migrates_and_restarts(spark, {name: ensure_operator_corpus() / name / "checkpoint"}, name, tmp_path)


def _migrates_and_restarts(spark, corpus: dict[str, Path], name: str, tmp_path: Path) -> None:
    src, control = stopped(corpus, name, tmp_path / "src"), copy_checkpoint(corpus[name], tmp_path / "c")
    dest = tmp_path / "dest"
    before = files_of(src)
    # In this session's Spark: the command's own path is run by the refusal and kill tests.
    doc = migrate(spark, src, dest, tmp_path / "audit").as_dict()
    assert files_of(src) == before
    migrated = load_head(str(dest))
    assert (migrated.format_version, migrated.provider) == (2, Provider.ROCKSDB)
    assert ckpt("validate", str(dest)).returncode == 0
    stores = sum(len(o.store_names) for o in migrated.operators.values())
    assert len(doc["proven"]) == stores and len(doc["stores"]) == 4 * stores
    assert not restarted_differently(spark, name, corpus[name].parent, dest, control, tmp_path / "more")
    after = load_head(str(dest))
    assert after.latest_committed_batch > doc["batch"] and after.format_version == 2
    newer = [p.name for p in (dest / "state").rglob("*") if p.suffix in (".zip", ".changelog")
             and int(p.name.split("_")[0].split(".")[0]) > doc["batch"] + 1]  # fmt: skip
    assert newer and all(NAMED_V2.match(n) for n in newer), newer


def _rows(zip_path: Path, db: Path) -> dict[bytes, bytes]:
    """Every key and value of a RocksDB zip (its SSTs from the store folder's `SSTs/`), opened in `db`."""
    import rocksdict

    from checkpoint.format.snapshot import parse_zip_metadata

    db.mkdir()
    with zipfile.ZipFile(zip_path) as zf:
        meta = parse_zip_metadata(zf.read("metadata"), str(zip_path))
        zf.extractall(db, [n for n in zf.namelist() if n != "metadata"])
    for sst in meta.sst_files:
        shutil.copy(zip_path.parent / "SSTs" / sst.dfs_name, db / sst.local_name)
    opened = rocksdict.Rdict(str(db), options=rocksdict.Options(raw_mode=True),
                             access_type=rocksdict.AccessType.read_only())  # fmt: skip
    try:
        return dict(opened.items())
    finally:
        opened.close()


def test_session_window_keys_are_laid_out_as_rocksdb_lays_them(defaults, tmp_path) -> None:
    """The HDFS-backed store keeps a session window's key whole; RocksDB cuts it for its prefix
    scan. The same query's state written by Spark's RocksDB provider (format V1) and migrated from
    the HDFS-backed store holds the same bytes, key and value, in every partition."""
    from checkpoint.fork.plan import read_source
    from checkpoint.migrate.flow import MigrationOptions, preflight
    from checkpoint.migrate.state import write_store
    from checkpoint.model.head import store_folder
    from checkpoint.rocksdb.publishing import ZipTarget
    from checkpoint.storage import Storage

    source = read_source(Storage(str(stopped(defaults, "hdfs_session", tmp_path / "src"))))
    prefixed = preflight(source, MigrationOptions(quiet_seconds=3600))
    assert [(op, name, p.leading) for (op, name), p in prefixed.items()] == [(0, "default", 1)]
    dest = tmp_path / "dest"
    for entry in source.lineage:
        target = ZipTarget(Storage(str(dest)), store_folder(entry.store), entry.version, "id", sidecar=True)
        write_store(source.ckpt, entry, target, prefix=prefixed[0, entry.store.store])
    for entry in source.lineage:
        folder, p = store_folder(entry.store), entry.store.partition
        ours = _rows(dest / folder / f"{entry.version}_id.zip", tmp_path / f"ours-{p}")
        by_spark = defaults["rocksdb_v1_session"] / folder / f"{entry.version}.zip"
        assert ours and ours == _rows(by_spark, tmp_path / f"spark-{p}"), p


def test_refusals_exit_2_and_write_nothing(defaults, corpus, tmp_path) -> None:
    """A live source, a destination that is not empty, a source already on RocksDB V2 (fork it), a
    session window whose key schema cannot be read, an operator without its metadata: one line each,
    exit 2, neither side changed."""
    live = copy_checkpoint(defaults["hdfs_agg"], tmp_path / "live")
    (live / "commits" / "24").touch()
    quiet = stopped(defaults, "hdfs_agg", tmp_path / "stopped")
    full = tmp_path / "full"
    full.mkdir()
    (full / "something").write_text("theirs")
    v2 = stopped({"snapshots": corpus["snapshots"]}, "snapshots", tmp_path / "v2")
    session = stopped(defaults, "hdfs_session", tmp_path / "session")
    (session / "state/0/0/_metadata/schema").write_bytes(b"\x00\x02v9")
    old = stopped(defaults, "hdfs_agg", tmp_path / "old")  # as a checkpoint last run before Spark 4.0
    (old / "state/0/_metadata/metadata").unlink()
    cases = [(live, tmp_path / "d1", "looks alive"), (quiet, full, "not empty"),
             (v2, tmp_path / "d3", "ckpt fork"), (session, tmp_path / "d4", "cannot be laid out"),
             (old, tmp_path / "d5", "run the query once on Spark 4.x")]  # fmt: skip
    for src, dest, why in cases:
        before = files_of(src), files_of(dest) if dest.exists() else {}
        out = ckpt("migrate", str(src), str(dest))
        assert out.returncode == 2 and why in out.stderr and out.stderr.count("\n") == 1, (why, out.stderr)
        assert (files_of(src), files_of(dest) if dest.exists() else {}) == before, why


@pytest.mark.slow
@pytest.mark.parametrize("point", ["migrate.after_store:2", "fork.after_step:1", "fork.after_step:3"])
def test_a_migration_killed_part_way_is_refused_by_validation_and_a_rerun_finishes_it(
    spark, defaults, tmp_path, point
) -> None:
    """`ckpt migrate` killed with -9 after two stores' state, after the offsets, and after every
    log (all of DEST but the proof and the completion marker): DEST is not a checkpoint to this
    tool (validation refuses the interrupted fork it is), and the same migration (in this
    session's Spark: a second JVM proves nothing more) starts it over and finishes, its proof
    reading SRC's state in every store of DEST."""
    from checkpoint.crash import CRASH_ENV

    src = stopped(defaults, "hdfs_dedup", tmp_path / "src")
    dest = tmp_path / "dest"
    killed = ckpt("migrate", str(src), str(dest), "--lease-ttl", "10m", env={CRASH_ENV: point})
    assert killed.returncode == -9, killed.stderr
    refused = ckpt("validate", str(dest))
    assert refused.returncode != 0  # an interrupted fork (exit 2) or INCOMPLETE_FORK (exit 1)
    assert "interrupted fork" in refused.stderr or "INCOMPLETE_FORK" in refused.stdout
    lapse_leases(src)
    proven = migrate(spark, src, dest, tmp_path / "audit").proven
    assert ckpt("validate", str(dest)).returncode == 0
    # Its proof read DEST's state equal to SRC's in every store, as a migration never interrupted.
    assert [p["store"] for p in proven] == ["default", "default"] and all(p["rows"] > 0 for p in proven)


def test_a_store_task_killed_with_9_stops_the_migration_and_a_rerun_finishes_it(
    spark, defaults, tmp_path, monkeypatch
) -> None:
    """Each store is written in a Spark task: the Python worker writing one dies as an OOM kill
    would end it. The migration stops with that store's reason in one line, DEST is refused by
    validation and no audit record is written, and the same migration, run again, finishes it."""
    from checkpoint.crash import CRASH_ENV
    from checkpoint.errors import MigrationFailed

    src, dest = stopped(defaults, "hdfs_agg", tmp_path / "src"), tmp_path / "dest"
    monkeypatch.setenv(CRASH_ENV, "migrate.task:0/1/default")
    with pytest.raises(MigrationFailed, match="op 0 / part 1 / default: the Spark task died") as failed:
        migrate(spark, src, dest, tmp_path / "audit")
    monkeypatch.delenv(CRASH_ENV)
    assert "\n" not in str(failed.value)
    refused = ckpt("validate", str(dest))  # no log is written before every store is
    assert refused.returncode == 2 and "interrupted fork" in refused.stderr
    assert not list((tmp_path / "audit").rglob("*.json"))
    again = migrate(spark, src, dest, tmp_path / "audit")
    assert len(again.stores) == 4 and again.proven
    assert (
        0 < again.state_seconds
        and 0 < again.proof_seconds
        and again.state_seconds + again.proof_seconds < again.seconds
    )
    assert ckpt("validate", str(dest)).returncode == 0


@pytest.mark.slow
def test_a_fresh_migration_is_maintained_at_once_and_restarts_like_its_source(
    ports, spark, defaults, tmp_path
) -> None:
    """Right after `ckpt migrate`, with the V1 batches before the migration batch still in DEST's
    logs: compaction, cleanup with the default retention, a fork and a repartition work on it as
    on any RocksDB V2 checkpoint, and DEST, maintained, restarts like an untouched copy. A fork at
    a batch before the migration is refused: DEST keeps those batches' logs, in the source's
    format, and none of their state files."""
    from checkpoint.repartition import RepartitionOptions, repartition_checkpoint
    from checkpoint.safety import InPlace, taken_at_once
    from testbed.clock import date_back

    src, dest = stopped(defaults, "hdfs_agg", tmp_path / "src"), tmp_path / "dest"
    control = copy_checkpoint(defaults["hdfs_agg"], tmp_path / "control")
    doc = migrate(spark, src, dest, tmp_path / "audit").as_dict()
    assert (dest / "commits" / "0").read_text().startswith("v1")  # the history DEST keeps
    head = load_head(str(dest))
    assert [head.states_at(b).name for b in (0, doc["batch"] - 1, doc["batch"])] == [
        "hdfs V1", "hdfs V1", "rocksdb V2"]  # fmt: skip
    early = ckpt("fork", str(dest), str(tmp_path / "early"), "--batch", str(doc["batch"] - 1))
    assert early.returncode == 2 and not (tmp_path / "early").exists()
    assert f"was written in hdfs V1, and the checkpoint holds rocksdb V2 state from batch {doc['batch']}" in (
        early.stderr
    )
    date_back(dest, 8 * 3600)  # past the grace: cleanup decides every file
    compacted = ckpt("compact", str(dest), "--min-chain", "1", "--json")
    assert compacted.returncode == 0, compacted.stderr
    cleaned = ckpt("gc", str(dest), "--query-stopped", "--apply", "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    assert json.loads(cleaned.stdout)["plan"]["against_batch"] == doc["batch"]
    forked = ckpt("fork", str(dest), str(tmp_path / "forked"))
    assert forked.returncode == 0, forked.stderr
    moved = copy_checkpoint(dest, tmp_path / "repartitioned")
    audit = AuditTrail(AuditTrail.default_for(str(moved)))
    request = InPlace(Storage(str(moved)), taken_at_once("tests"), audit)
    options = RepartitionOptions(2, ports.repartition, quiet_seconds=0)
    assert repartition_checkpoint(request, options).to_partitions == 2
    for path in (dest, tmp_path / "forked", moved):
        assert ckpt("validate", str(path)).returncode == 0, path
    assert not restarted_differently(
        spark, "hdfs_agg", defaults["hdfs_agg"].parent, dest, control, tmp_path / "more"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seen", "error"),
    [
        ("rows", "Spark reads 9 rows .* and 8 .* in the destination"),
        ("misplaced", "1 rows of the destination .* another partition"),
        ("count", "count 10 keys and Spark reads 9 rows"),
    ],
)
def test_a_destination_spark_reads_otherwise_is_never_marked_complete(
    ports, spark, defaults, tmp_path, monkeypatch, seen: str, error: str
) -> None:
    """The proof is what stands between the state written and a complete DEST: Spark's reader
    made to see one row fewer in DEST, or one row away from its partition, or a snapshot's key
    count one off, stops the migration (MigrationFailed), DEST stays refused by validation, and a
    run with the real reader finishes it."""
    from checkpoint.errors import MigrationFailed
    from checkpoint.migrate import MigrationOptions, MigrationPorts, migrate_checkpoint, state
    from checkpoint.safety import AuditTrail, TwoSided, taken_at_once
    from checkpoint.storage import Storage

    class OneRowOff(ports.digests):
        def compare(self, src, dest, batch, store, placement):
            was, now = super().compare(src, dest, batch, store, placement)
            off = {"rows": {"rows": now.rows - 1}, "misplaced": {"misplaced": 1}}.get(seen, {})
            return was, dataclasses.replace(now, **off)

    counted = state._KeyCount.total
    if seen == "count":  # one partition's snapshot counts a key more than it holds
        extra = iter([1])
        monkeypatch.setattr(state._KeyCount, "total", lambda self, db: counted(self, db) + next(extra, 0))

    src, dest = stopped(defaults, "hdfs_agg", tmp_path / "src"), tmp_path / "dest"
    storages = Storage(str(src)), Storage(str(dest))
    audit = AuditTrail(str(tmp_path / "audit"))
    with pytest.raises(MigrationFailed, match=error):
        # The door, with this reader and the state written here (`jobs.migrate` writes it in Spark tasks).
        faulty = MigrationPorts(digests=lambda s, d: OneRowOff(spark, s, d))
        migrate_checkpoint(TwoSided(*storages, taken_at_once("tests"), audit), MigrationOptions(faulty))
    monkeypatch.setattr(state._KeyCount, "total", counted)
    refused = ckpt("validate", str(dest))
    assert refused.returncode != 0 and "INCOMPLETE_FORK" in refused.stdout
    real = MigrationOptions(ports.migration)
    assert migrate_checkpoint(TwoSided(*storages, taken_at_once("tests"), audit), real).proven
    assert ckpt("validate", str(dest)).returncode == 0


def _swap_state_files(one: Path, other: Path) -> None:
    """The state files of two partitions swapped, each keeping its schema (`_metadata`)."""
    moves = [(f, other / f.relative_to(one)) for f in one.rglob("*") if f.is_file()]
    moves += [(f, one / f.relative_to(other)) for f in other.rglob("*") if f.is_file()]
    staged = [(f.rename(f.with_name(f.name + ".swap")), to) for f, to in moves if "_metadata" not in f.parts]
    for f, to in staged:
        f.rename(to)


def test_the_proof_finds_a_row_in_another_partition_than_sparks_hash_puts_it_in(
    ports, spark, defaults, tmp_path
) -> None:
    """The placement the proof checks, on state Spark placed (none away, in every store: a join's
    keyWithIndexToValue hashes fewer fields than its key; a session window's, which does too, is
    checked by its migration's proof) and on the same state with two partitions' files swapped
    (every row of both away)."""
    name = "hdfs_join"
    from checkpoint.fork.plan import read_source
    from checkpoint.migrate import ReadSide
    from checkpoint.migrate.flow import placement_of
    from checkpoint.model.checkpoint import StoreId
    from checkpoint.storage import Storage

    path = copy_checkpoint(defaults[name], tmp_path / "c")
    source = read_source(Storage(str(path)))
    reads = {}
    for label in ("placed", "swapped"):
        engine = ports.digests(spark, Storage(str(path)))
        for store in source.ckpt.operators[0].metadata.stores:
            placement = placement_of(store.num_partitions, store)
            (reads[label, store.name],) = engine.summarize([ReadSide(Storage(str(path)), 1)], source.batch,
                                                           StoreId(0, 0, store.name), placement)  # fmt: skip
        _swap_state_files(path / "state/0/0", path / "state/0/1")
    for store in source.ckpt.operators[0].metadata.stores:
        placed, swapped = reads["placed", store.name], reads["swapped", store.name]
        assert placed.rows > 0 and placed.misplaced == 0, (store.name, placed)
        assert swapped.rows == placed.rows and swapped.digest == placed.digest, store.name
        assert 0 < swapped.misplaced < swapped.rows, (store.name, swapped)


@pytest.mark.parametrize("limit", [1_000, 10])
def test_a_store_is_counted_without_reading_it_back(tmp_path, limit: int) -> None:
    """Puts of new and present keys, deletes of present and absent ones, a key touched twice in a
    run: the tracked count is the DB's; past the tracking bound it is the DB's too, counted."""
    import random

    import rocksdict

    from checkpoint.migrate.state import _KeyCount
    from checkpoint.policy import POLICY

    db = rocksdict.Rdict(str(tmp_path / "db"), options=rocksdict.Options(raw_mode=True))
    rng = random.Random(7)
    base = [b"k%03d" % i for i in range(50)]
    for k in base:
        db[k] = b"v"
    db.flush()
    count = _KeyCount(len(base), dataclasses.replace(POLICY, migrate_tracked_keys=limit))
    count.look_in(rocksdict.Rdict(str(tmp_path / "db"), options=rocksdict.Options(raw_mode=True),
                                  access_type=rocksdict.AccessType.read_only()))  # fmt: skip
    for _ in range(40):
        op, keys = rng.choice(["put", "delete"]), [b"k%03d" % rng.randrange(120) for _ in range(8)]
        count.touch(op, keys)
        for k in keys:
            if op == "put":
                db[k] = b"w"
            else:
                db.delete(k)
    assert count.total(db) == sum(1 for _ in db.keys()) > 0
    assert (count.before is None) == (limit == 10)
    count.close()
    db.close()


def test_sparks_state_rewriter_cannot_write_format_v2_from_v1_so_the_project_writes_it(
    ports, spark, defaults, tmp_path
) -> None:
    """Why the migration writes the V2 snapshots itself (docs/migrate.md): Spark's `StateRewriter`
    (4.3), asked to rewrite a V1 transformWithState checkpoint's state in a V2 session, refuses; in a
    V1 session it writes V1, as the next batch of the checkpoint it reads. Should a Spark do it, this
    fails, and the migration should call it instead."""
    from py4j.protocol import Py4JJavaError

    src = copy_checkpoint(defaults["rocksdb_v1_every_state"], tmp_path / "src")
    jvm, none = spark._jvm, spark._jvm.scala.Option.apply(None)
    with ports.confs(V2_SESSION), pytest.raises(Py4JJavaError) as refused:
        jvm.org.apache.spark.sql.execution.streaming.state.StateRewriter(
            spark._jsparkSession, 5, 6, Storage(str(src)).spark_url, spark._jsc.hadoopConfiguration(),
            none, none, none,
        ).run()  # fmt: skip
    assert "STATE_CHECKPOINT_FORMAT_VERSION_MISMATCH" in str(refused.value)
