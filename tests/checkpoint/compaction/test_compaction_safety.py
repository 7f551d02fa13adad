"""Compaction refuses bad input and isolates failures: derived from real corpus checkpoints.

A checkpoint with error findings is refused before anything is planned (CLI, core, Dagster), a
rebuild never builds on bytes that fail their `.crc` sidecar, and a store that fails in any way
fails alone: the others are rebuilt, and the CLI exits 1.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from checkpoint.compaction.targets import CompactionPlanOptions, plan_compaction
from checkpoint.crash import CRASH_ENV
from checkpoint.errors import CompactionRefused
from checkpoint.format.crc import crc32c_signed
from checkpoint.model.head import load_head
from checkpoint.model.lineage import checkpoint_lineage
from testbed.clock import date_back
from testbed.copying import copy_checkpoint
from tests.support import damage
from tests.support.cli import CKPT, ckpt
from tests.support.compacting import compact_unleased
from tests.support.files import files_of

pytestmark = pytest.mark.slow


def _compact(path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CKPT, "compact", str(path), "--master", "local[2]", "--json", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_a_checkpoint_with_error_findings_is_refused_and_nothing_is_written(copy_of) -> None:
    path = copy_of("long_chain")
    (path / "commits" / "20").unlink()  # COMMIT_LOG_GAP: batch 20 planned below a later commit
    before = files_of(path)
    with pytest.raises(CompactionRefused, match="COMMIT_LOG_GAP"):
        plan_compaction(
            load_head(str(path), strict=False, recent=2), CompactionPlanOptions(min_chain=1, quiet_seconds=0)
        )
    out = _compact(path, "--min-chain", "1")
    assert out.returncode == 2 and out.stdout == ""
    assert "refused" in out.stderr and "COMMIT_LOG_GAP" in out.stderr and "nothing was written" in out.stderr
    assert files_of(path) == before


def _chain_file(path: Path, partition: int) -> Path:
    ckpt = load_head(str(path))
    entry = next(e for e in checkpoint_lineage(ckpt) if e.store.partition == partition)
    return path / entry.chain[len(entry.chain) // 2].rel


def test_a_stale_sidecar_fails_its_store_and_the_others_go_on(copy_of) -> None:
    path = copy_of("long_chain")
    victim = _chain_file(path, 1)
    sidecar = victim.with_name(victim.name + ".crc")
    body = json.loads(sidecar.read_text())
    assert body["value"] == crc32c_signed(victim.read_bytes())  # Spark wrote a correct one
    body["value"] ^= 1  # the file's bytes are intact; its checksum says otherwise, as Spark would see it
    sidecar.write_text(json.dumps(body))
    out = _compact(path, "--min-chain", "1")
    assert out.returncode == 1, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert sorted(m["partition"] for m in doc["materialized"]) == [0, 2, 3]
    (failed,) = doc["failed"]
    assert failed["partition"] == 1 and ".crc sidecar" in failed["error"] and victim.name in failed["error"]
    assert not list((path / "state" / "0" / "1").glob("*.zip"))  # nothing built on the bad bytes


@pytest.mark.parametrize("hidden_crc", [False, True])
def test_a_damaged_sst_fails_its_store_and_the_others_go_on(spark, copy_of, hidden_crc: bool) -> None:
    """An SST of the base zip changed, its size kept. Where Hadoop's hidden checksum is gone (as on
    an object store) only RocksDB can tell; where it is there, the copy fails it before RocksDB opens."""
    path = copy_of("snapshots")
    newest = load_head(str(path)).latest_committed_batch + 1
    for z in path.rglob(f"{newest}_*.zip"):  # Spark's own snapshots of the newest version go first
        damage.remove(z)
    ckpt = load_head(str(path), recent=2)
    targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0)).targets
    based = [t for t in targets if t.entry.base is not None]
    assert len(targets) >= 2 and based
    victim = based[0].entry.store
    snapshot = ckpt.read_snapshot(based[0].entry.base)
    sst = path / based[0].entry.base.rel.rsplit("/", 1)[0] / "SSTs" / snapshot.metadata.sst_files[0].dfs_name
    data = bytearray(sst.read_bytes())
    for i in range(len(data) // 4, len(data) // 2):  # same size, so only RocksDB can tell
        data[i] ^= 0xFF
    sst.write_bytes(bytes(data))
    if not hidden_crc:
        sst.with_name(f".{sst.name}.crc").unlink()
    outcomes = compact_unleased(spark, ckpt, targets)
    failed = [o for o in outcomes if not o.ok]
    assert [o.store for o in failed] == [victim]
    if hidden_crc:
        assert "Hadoop checksum mismatch" in failed[0].error and sst.name in failed[0].error, failed[0].error
    else:
        assert "CheckpointError" not in failed[0].error and failed[0].error  # not one of ours: RocksDB's
    assert all(o.ok for o in outcomes if o.store != victim) and len(outcomes) == len(targets)


def test_a_spark_connect_session_rebuilds_rocksdb_stores_here_and_tells_hdfs_ones_why(
    defaults, copy_of, tmp_path
) -> None:
    """A Spark Connect session has no SparkContext to start Python tasks with, nor a driver JVM on
    this side: RocksDB stores are rebuilt in this process and published; each HDFS-backed store is
    told why it is not compacted, and nothing is written into its checkpoint."""

    class Connect:  # as PySpark's remote session answers
        def __getattr__(self, name):
            raise AttributeError(f"[JVM_ATTRIBUTE_NOT_SUPPORTED] {name}")

    path = copy_of("long_chain")
    ckpt = load_head(str(path), recent=2)
    targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0)).targets
    outcomes = compact_unleased(Connect(), ckpt, targets)
    assert len(outcomes) == 4 and all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert len({p.parent for p in (path / "state").rglob("*.zip")}) == 4
    hdfs = copy_checkpoint(defaults["hdfs_deltas"], tmp_path / "hdfs")
    date_back(hdfs, 2 * 3600)
    before = files_of(hdfs)
    ckpt = load_head(str(hdfs), recent=2)
    targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0)).targets
    outcomes = compact_unleased(Connect(), ckpt, targets)
    assert outcomes and all("Spark Connect" in (o.error or "") for o in outcomes), [o.error for o in outcomes]
    assert files_of(hdfs) == before


def test_a_task_killed_with_9_fails_its_store_alone(
    spark, corpus, corpus_root, copy_of, tmp_path, monkeypatch
):
    """The Python worker rebuilding one store dies as an OOM kill or a segfault would end it: the
    other stores publish, the dead one is reported, and the query restarts like an untouched copy."""
    from testbed.corpus import scenario_named
    from tests.support.state import restart_like_untouched

    path, untouched = copy_of("long_chain"), tmp_path / "untouched"
    copy_checkpoint(corpus["long_chain"], untouched)
    ckpt = load_head(str(path), recent=2)
    targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0)).targets
    assert len(targets) == 4
    monkeypatch.setenv(CRASH_ENV, "compaction.task:0/2/default")
    results = compact_unleased(spark, ckpt, targets)
    monkeypatch.delenv(CRASH_ENV)
    failed = [r for r in results if not r.ok]
    assert [r.store.partition for r in failed] == [2] and "the Spark task died" in failed[0].error
    assert sorted(r.store.partition for r in results if r.ok) == [0, 1, 3]
    zips = {p.parent.name for p in path.rglob("*.zip")}
    assert zips == {"0", "1", "3"}  # the dead task published nothing
    restart_like_untouched(spark, scenario_named("long_chain"), corpus_root / "long_chain", path, untouched,
                           tmp_path / "more-input")  # fmt: skip


@pytest.mark.parametrize("name", ["long_chain", "join"])
def test_a_checkpoint_spark_4_0_wrote_is_refused_and_nothing_is_written(written_by, tmp_path, name) -> None:
    """The reproduction: compaction published zips whose metadata says v1 into checkpoints Spark
    4.0.5 wrote, and every task failed at the restart under 4.0.5 ("Expected v2, but found v1").
    The generation is told from the store's own files: the join's stores sit on 4.0's snapshots,
    which carry v2 (refused: this release writes v1); the aggregation's delta-only chain has none
    of the .crc sidecars 4.1+ write, so it cannot be told apart from 4.0's (refused). Exit 2, one
    line, nothing written."""
    path = tmp_path / name
    copy_checkpoint(written_by("4.0.5") / name / "checkpoint", path)
    # Deterministic whatever the hour: a stopped query (its files dated 2 h back, past the quiet
    # period), and every store with a chain at its newest version (Spark's own newest snapshots
    # taken away, as before their upload). Found when the join's cached copy aged past the quiet
    # period and every store loaded from its own snapshot: nothing was a target, nothing refused.
    date_back(path, 2 * 3600)
    damage.before_the_last_upload(path)
    before = files_of(path)
    validated = ckpt("validate", str(path))
    assert validated.returncode == 0, validated.stdout + validated.stderr  # healthy, as 4.0 reads it
    out = _compact(path, "--min-chain", "1")
    assert out.returncode == 2 and out.stdout == "", out.stderr[-2000:]
    assert "refused" in out.stderr and "Nothing was written" in out.stderr
    assert ("metadata v2" if name == "join" else "cannot tell which Spark") in out.stderr
    assert out.stderr.strip().count("\n") == 0
    assert files_of(path) == before


def _big_delta(path: Path, records: int, value_bytes: int) -> None:
    """A delta of the HDFS-backed store's framing (`i32 klen, key, i32 vlen, value`, ended by -1) in
    lz4-java's blocks, written as it streams: a store too large for a small driver's heap, standing
    in for the 10^7-key stores of a real fleet."""
    import struct

    from testbed.lz4java import frame

    value = b"v" * value_bytes
    with path.open("wb") as out:
        batch = 4096
        for start in range(0, records, batch):
            rows = b"".join(
                struct.pack(">i", 8) + struct.pack(">q", n) + struct.pack(">i", value_bytes) + value
                for n in range(start, min(records, start + batch))
            )
            out.write(frame(rows)[: -len(frame(b""))])  # every block but the end marker
        out.write(frame(struct.pack(">i", -1)))


def test_an_hdfs_store_larger_than_the_drivers_heap_is_refused_alone(defaults, tmp_path) -> None:
    """Spark's provider holds the whole map on the driver's heap, which every store shares: a store
    whose map would not fit is refused before it is loaded, saying what it needs and which setting
    to raise; the three other stores are compacted."""
    path = copy_checkpoint(defaults["hdfs_deltas"], tmp_path / "hdfs")
    victim = path / "state/0/0/1.delta"
    _big_delta(victim, records=700_000, value_bytes=1000)  # about 700 MB as a map
    (victim.parent / ".1.delta.crc").unlink()
    date_back(path, 2 * 3600)
    before = files_of(path / "state/0/0")
    out = _compact(path, "--min-chain", "1", "--driver-memory", "1g")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["materialized"]) == 3 and len(doc["failed"]) == 1, doc
    error = doc["failed"][0]["error"]
    assert "spark.driver.memory" in error and "MiB" in error and "--driver-memory" in error, error
    assert files_of(path / "state/0/0") == before
