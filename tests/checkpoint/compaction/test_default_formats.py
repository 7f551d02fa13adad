"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`), compacted: the snapshot Spark would write, the query restarted
like an untouched copy, a running query refused, Hadoop's checksums."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.head import load_head
from checkpoint.model.lineage import checkpoint_lineage
from tests.support.cli import ckpt
from tests.support.damage import remove
from tests.support.defaults import V1_SESSION, copy_default

# Chains of at least 3 with and without a base: Spark's snapshots at 22 leave hdfs_agg a chain of 3,
# hdfs_join and hdfs_session have none (the join's four stores, the session window's prefix-scanned
# map), and rocksdb_v1_changelog replays 5 changelogs onto its zip at 20. hdfs_deltas (no base) is
# compacted by the CLI in the checksum tests below and on S3 (test_on_s3.py).
COMPACTED = ("hdfs_agg", "hdfs_join", "hdfs_session", "rocksdb_v1_changelog")


HDFS_NAMES, ROCKSDB_NAMES = "snapshot", "zip"


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPACTED)
def test_compaction_writes_the_snapshot_spark_would_and_the_query_restarts_like_untouched(
    ports, spark, defaults, tmp_path, name
) -> None:
    """Every store of the stopped query gets the snapshot of its latest committed version
    (`<v>.snapshot` by Spark's own provider, `<v>.zip` by the rebuild), under Spark's V1 name and
    nothing else new; Spark's reader loads the same state from that snapshot alone, with the chain
    before it gone; and the restarted query ends in the state of an untouched copy."""
    from checkpoint.compaction.targets import CompactionPlanOptions, plan_compaction
    from testbed.clock import date_back
    from testbed.defaults import scenario_named
    from tests.support.compacting import compact_unleased
    from tests.support.files import files_of
    from tests.support.state import read_state, restart_like_untouched

    compacted, untouched = (
        copy_default(defaults, name, tmp_path / "c"),
        copy_default(defaults, name, tmp_path / "u"),
    )
    date_back(compacted, 2 * 3600)  # stopped for longer than the quiet period
    before_files = files_of(compacted)
    latest = load_checkpoint(str(compacted)).latest_committed_batch
    entries = checkpoint_lineage(load_checkpoint(str(compacted)), latest)
    # In this session's Spark: `ckpt compact` itself runs in the checksum and leftover tests.
    ckpt_ = load_head(str(compacted), recent=2)
    outcomes = compact_unleased(
        spark, ckpt_, plan_compaction(ckpt_, CompactionPlanOptions(min_chain=1)).targets
    )
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
    with ports.confs(V1_SESSION):
        expected = read_state(spark, untouched, latest, name)
        assert read_state(spark, compacted, latest, name) == expected
        alone = copy_default({name: compacted}, name, tmp_path / "alone")
        for f in (f for e in entries for f in (e.base, *e.chain) if f is not None):
            remove(alone / f.rel)
        assert read_state(spark, alone, latest, name) == expected
        final = restart_like_untouched(
            spark, scenario_named(name), defaults[name].parent, compacted, untouched, tmp_path / "more"
        )
    assert final > latest


def test_v1_compaction_refuses_a_query_that_is_not_stopped_and_writes_nothing(defaults, tmp_path) -> None:
    """V1 names carry no attempt id: a recent commit or an unfinished batch refuses, exit 2."""
    from testbed.clock import date_back
    from tests.support.files import files_of

    recent = copy_default(defaults, "hdfs_deltas", tmp_path)
    (recent / "commits" / "11").touch()
    unfinished = copy_default(defaults, "hdfs_killed_before_restart", tmp_path)
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
    from testbed.clock import date_back

    path = copy_default(defaults, "hdfs_deltas", tmp_path)
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

    path = copy_default(defaults, "hdfs_deltas", tmp_path)
    (path / "state/0/1/.12.snapshot.crc.crc").write_bytes(b"stale")
    ckpt = load_checkpoint(str(path))
    assert taken_names(ckpt, "state/0/1", 12) == [".12.snapshot.crc.crc"]
    assert taken_names(ckpt, "state/0/0", 12) == []


@pytest.mark.slow
def test_a_delta_that_fails_hadoops_checksum_fails_its_store_alone(defaults, tmp_path) -> None:
    """One byte of a delta's LZ4 end mark changed, its length kept: neither validation nor Spark's
    own load sees it (Spark's reader returns the state), Hadoop's checksum of the copy does; that
    store gets no snapshot, the others do."""
    from testbed.clock import date_back

    path = copy_default(defaults, "hdfs_deltas", tmp_path)
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
