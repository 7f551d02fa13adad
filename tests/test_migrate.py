"""`ckpt migrate`: checkpoints in Spark's default formats (the HDFS-backed store, RocksDB format
V1) carried to RocksDB format V2 with their state, proven by the real query restarted on the
destination beside an untouched copy of the source restarted with the same input."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from checkpoint.format.providers import Provider
from checkpoint.model.head import load_head
from testbed.copying import copy_checkpoint
from tests.support.cli import ckpt
from tests.support.files import files_of

NAMED_V2 = re.compile(r"^\d+_[0-9a-f-]{36}\.(zip|changelog)$")
V2_SESSION = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}
# aggregation, dedup then aggregation, stream-stream join, windowed aggregation, applyInPandasWithState,
# and RocksDB V1 with and without changelogs
MIGRATED = ("hdfs_agg", "hdfs_dedup", "hdfs_join", "hdfs_window", "hdfs_pandas", "rocksdb_v1",
            "rocksdb_v1_changelog")  # fmt: skip


def restarted_differently(spark, name: str, scenario_dir: Path, migrated: Path, control: Path, extra: Path):
    """The real query restarted on a migrated checkpoint and on an untouched copy of its source with
    the same new input: where what they emit and the state they end with (each read by Spark in a
    session of its format) differ; nothing when they are the same."""
    from jobs.spark_session import scoped_confs
    from testbed.restart import differences, restart, state_rows
    from tests.test_default_formats import V1_SESSION

    runs = {label: restart(spark, name, scenario_dir, path, extra, read_state=False)
            for label, path in (("migrated", migrated), ("control", control))}  # fmt: skip
    for label, path, confs in (("migrated", migrated, V2_SESSION), ("control", control, V1_SESSION)):
        with scoped_confs(spark, confs):
            runs[label]["state"] = state_rows(spark, path, name)
    return differences(runs["migrated"], runs["control"])


def _migrate(spark, src: Path, dest: Path, audit: Path):
    from checkpoint.cleanup.audit import AuditTrail
    from checkpoint.storage import Storage
    from jobs.migrate import migrate

    return migrate(lambda: spark, Storage(str(src)), Storage(str(dest)), AuditTrail(str(audit)))


def _stopped(defaults, name: str, where: Path) -> Path:
    from testbed.demo import date_back

    path = copy_checkpoint(defaults[name], where)
    date_back(path, 2 * 3600)  # stopped for longer than the quiet period
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", MIGRATED)
def test_a_migrated_checkpoint_restarts_on_rocksdb_v2_like_its_source(
    spark, defaults, tmp_path, name
) -> None:
    """DEST validates as RocksDB V2 with no finding; restarted with one more input file, the real
    query emits what the untouched source emits and ends in the same state (Spark's reader, each in
    its own format), writing `<v>_<id>` files; SRC's bytes never change."""
    src, control = _stopped(defaults, name, tmp_path / "src"), copy_checkpoint(defaults[name], tmp_path / "c")
    dest = tmp_path / "dest"
    before = files_of(src)
    # In this session's Spark: the command's own path is run by the refusal and kill tests.
    doc = _migrate(spark, src, dest, tmp_path / "audit").as_dict()
    assert files_of(src) == before
    migrated = load_head(str(dest))
    assert (migrated.format_version, migrated.provider) == (2, Provider.ROCKSDB)
    assert ckpt("validate", str(dest)).returncode == 0
    stores = sum(len(o.store_names) for o in migrated.operators.values())
    assert len(doc["proven"]) == stores and len(doc["stores"]) == 4 * stores
    assert not restarted_differently(spark, name, defaults[name].parent, dest, control, tmp_path / "more")
    after = load_head(str(dest))
    assert after.latest_committed_batch > doc["batch"] and after.format_version == 2
    newer = [p.name for p in (dest / "state").rglob("*") if p.suffix in (".zip", ".changelog")
             and int(p.name.split("_")[0].split(".")[0]) > doc["batch"] + 1]  # fmt: skip
    assert newer and all(NAMED_V2.match(n) for n in newer), newer


def test_refusals_exit_2_and_write_nothing(defaults, corpus, tmp_path) -> None:
    """A live source, a destination that is not empty, a source already on RocksDB V2 (fork it), a
    session window on the HDFS-backed store, an operator without its metadata: one line each,
    exit 2, neither side changed."""
    live = copy_checkpoint(defaults["hdfs_agg"], tmp_path / "live")
    (live / "commits" / "24").touch()
    stopped = _stopped(defaults, "hdfs_agg", tmp_path / "stopped")
    full = tmp_path / "full"
    full.mkdir()
    (full / "something").write_text("theirs")
    v2 = _stopped({"snapshots": corpus["snapshots"]}, "snapshots", tmp_path / "v2")
    session = _stopped(defaults, "hdfs_session", tmp_path / "session")
    old = _stopped(defaults, "hdfs_agg", tmp_path / "old")  # as a checkpoint last run before Spark 4.0
    (old / "state/0/_metadata/metadata").unlink()
    cases = [(live, tmp_path / "d1", "looks alive"), (stopped, full, "not empty"),
             (v2, tmp_path / "d3", "ckpt fork"), (session, tmp_path / "d4", "prefix-scanned"),
             (old, tmp_path / "d5", "run the query once on Spark 4.x")]  # fmt: skip
    for src, dest, why in cases:
        before = files_of(src), files_of(dest) if dest.exists() else {}
        out = ckpt("migrate", str(src), str(dest))
        assert out.returncode == 2 and why in out.stderr and out.stderr.count("\n") == 1, (why, out.stderr)
        assert (files_of(src), files_of(dest) if dest.exists() else {}) == before, why


@pytest.mark.slow
@pytest.mark.parametrize("point", ["migrate.after_store:2", "fork.after_step:1"])
def test_a_migration_killed_part_way_is_refused_by_validation_and_a_rerun_finishes_it(
    defaults, tmp_path, point
) -> None:
    """kill -9 after two stores' state, and after the offsets: DEST is not a checkpoint to this
    tool (validation refuses the interrupted fork it is), and the same command starts it over and
    finishes, with the same state as a migration that was never interrupted."""
    from checkpoint.crash import CRASH_ENV

    src = _stopped(defaults, "hdfs_dedup", tmp_path / "src")
    dest = tmp_path / "dest"
    killed = ckpt("migrate", str(src), str(dest), "--lease-ttl", "1s", env={CRASH_ENV: point})
    assert killed.returncode == -9, killed.stderr
    refused = ckpt("validate", str(dest))
    assert refused.returncode != 0  # an interrupted fork (exit 2) or INCOMPLETE_FORK (exit 1)
    assert "interrupted fork" in refused.stderr or "INCOMPLETE_FORK" in refused.stdout
    time.sleep(1.5)  # the killed run's leases expire
    again = ckpt("migrate", str(src), str(dest), "--json")
    assert again.returncode == 0, again.stderr
    assert ckpt("validate", str(dest)).returncode == 0
    clean = ckpt("migrate", str(src), str(tmp_path / "clean"), "--json")
    proven = [json.loads(out.stdout)["proven"] for out in (again, clean)]
    assert proven[0] == proven[1] and proven[0]


@pytest.mark.slow
def test_the_tools_actions_run_on_a_migrated_checkpoint(spark, defaults, tmp_path) -> None:
    """Once the query has run on it, a migrated checkpoint is compacted, cleaned and forked as any
    RocksDB V2 checkpoint, and validates after each."""
    from testbed.demo import date_back
    from testbed.restart import restart

    src, dest = _stopped(defaults, "hdfs_agg", tmp_path / "src"), tmp_path / "dest"
    _migrate(spark, src, dest, tmp_path / "audit")
    restart(spark, "hdfs_agg", defaults["hdfs_agg"].parent, dest, tmp_path / "more", read_state=False)
    date_back(dest, 2 * 3600)
    compacted = ckpt("compact", str(dest), "--min-chain", "1", "--json")
    assert compacted.returncode == 0 and len(json.loads(compacted.stdout)["materialized"]) == 4, (
        compacted.stderr
    )
    cleaned = ckpt("gc", str(dest), "--retain-batches", "1", "--apply", "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    forked = ckpt("fork", str(dest), str(tmp_path / "forked"))
    assert forked.returncode == 0, forked.stderr
    for path in (dest, tmp_path / "forked"):
        assert ckpt("validate", str(path)).returncode == 0


@pytest.mark.slow
def test_the_dagster_job_migrates_a_partition_into_a_new_one(defaults, tmp_path) -> None:
    """`migrate_checkpoint` from the Launchpad's config: the destination, under a configured root,
    becomes a V2 partition; one under no root is refused with nothing written."""
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, SparkResource
    from orchestration.location import build_definitions

    root = tmp_path / "root"
    _stopped(defaults, "hdfs_dedup", root / "orders")
    defs = build_definitions([CheckpointRoot(name="prod", url=str(root))])
    job = defs.resolve_job_def("migrate_checkpoint")

    def launch(destination: Path) -> dg.ExecuteInProcessResult:
        config = {"source_partition": partition_key("prod", "orders"), "destination": str(destination)}
        return job.execute_in_process(run_config={"ops": {"migrate": {"config": config}}}, instance=instance,
                                      resources={"spark": SparkResource(master="local[2]")},
                                      raise_on_error=False)  # fmt: skip

    with dg.instance_for_test() as instance:
        result = launch(root / "v2" / "orders")
        assert result.success
        output = next(e for e in result.all_events if e.event_type_value == "STEP_OUTPUT")
        meta = {k: v.value for k, v in output.event_specific_data.metadata.items()}
        assert (meta["source_state"], meta["stores"]) == ("hdfs V1", 8)  # two operators, four partitions
        assert meta["partition"] in instance.get_dynamic_partitions("checkpoints")
        assert load_head(str(root / "v2" / "orders")).format_version == 2
        outside = tmp_path / "elsewhere"
        refused = launch(outside)
        assert not refused.success and not outside.exists()


@pytest.mark.slow
def test_a_destination_spark_reads_otherwise_is_never_marked_complete(spark, defaults, tmp_path) -> None:
    """The proof is what stands between the state written and a complete DEST: Spark's reader
    made to see one row fewer in DEST stops the migration (MigrationFailed), DEST stays refused by
    validation, and a run with the real reader finishes it."""
    from checkpoint.cleanup.audit import AuditTrail
    from checkpoint.errors import MigrationFailed
    from checkpoint.migrate.flow import migrate as flow
    from checkpoint.storage import Storage
    from jobs.migrate import SparkStateDigests
    from jobs.migrate import migrate as run

    class OneRowShort(SparkStateDigests):
        def digest(self, storage, batch, store, format_version):
            rows, digest = super().digest(storage, batch, store, format_version)
            return (rows - 1, digest) if format_version == 2 else (rows, digest)

    src, dest = _stopped(defaults, "hdfs_agg", tmp_path / "src"), tmp_path / "dest"
    storages = Storage(str(src)), Storage(str(dest))
    audit = AuditTrail(str(tmp_path / "audit"))
    with pytest.raises(MigrationFailed, match="Spark reads 9 rows .* and 8 .* in the destination"):
        flow(lambda: OneRowShort(spark, *storages), *storages, audit)
    refused = ckpt("validate", str(dest))
    assert refused.returncode != 0 and "INCOMPLETE_FORK" in refused.stdout
    assert run(lambda: spark, *storages, audit).proven
    assert ckpt("validate", str(dest)).returncode == 0
