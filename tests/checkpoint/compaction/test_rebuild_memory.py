"""A rebuild's memory follows the chain, not the store: two real checkpoints (PySpark, one
partition) whose base snapshots differ tenfold in size, with the same 20-changelog chain on top."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import pytest

from checkpoint.compaction import rebuild
from checkpoint.compaction.rebuild import rebuild_store
from checkpoint.errors import RebuildError
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import checkpoint_lineage
from testbed.copying import copy_checkpoint
from testbed.generators import ensure_big_base
from tests.checkpoint.compaction.test_compaction import _rows_of_partition, _snapshot_rows

pytestmark = pytest.mark.slow
SMALL, BIG, TOUCH = 20_000, 200_000, 5_000


@pytest.fixture(scope="module")
def bases() -> dict[int, Path]:
    return {keys: ensure_big_base(keys, TOUCH) / "checkpoint" for keys in (SMALL, BIG)}


def _copy_and_plan(src: Path, dest: Path):
    shutil.copytree(src, dest)
    ckpt = load_checkpoint(str(dest))
    (entry,) = checkpoint_lineage(ckpt)
    assert entry.base is not None and entry.chain_length == 20
    return ckpt, entry


def _files(path: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in path.rglob("*")}


def test_peak_python_memory_stays_flat_when_the_base_grows_tenfold(bases, spark, tmp_path, monkeypatch):
    # Both by lookups of the touched keys, whose batches are the memory that must stay flat: left
    # to choose, the small base is compared by one scan of both stores, which holds less still.
    monkeypatch.setattr(rebuild, "_SCAN_WHEN_TOUCHED_OF", 0)
    results, peaks = {}, {}
    for keys, src in bases.items():
        ckpt, entry = _copy_and_plan(src, tmp_path / str(keys))
        tracemalloc.start()
        try:
            results[keys] = rebuild_store(ckpt, entry)
            peaks[keys] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    small, big = results[SMALL], results[BIG]
    assert (small.records, small.touched_keys) == (big.records, big.touched_keys) == (100_000, 25_000)
    assert big.keys - small.keys == BIG - SMALL  # numKeys: the base's, plus inserts, minus deletes
    assert big.ssts_reused >= 1 and big.ssts_written >= 1  # the base's SSTs are kept, not rewritten
    assert peaks[BIG] <= 1.3 * peaks[SMALL], peaks
    # Spark loads exactly the new zip of the big store and finds what its own replay finds.
    batch = big.version - 1
    expected = _rows_of_partition(spark, bases[BIG], batch, 0, {})
    assert len(expected) == big.keys
    assert _snapshot_rows(spark, tmp_path / str(BIG), batch, 0, {}) == expected


def test_a_small_memtable_flushes_the_chain_to_several_ssts(bases, spark, tmp_path) -> None:
    ckpt, entry = _copy_and_plan(bases[SMALL], tmp_path / "small")
    policy = rebuild.Policy(rebuild_memtable_bytes=256 << 10, rebuild_block_cache_bytes=1 << 20)
    result = rebuild_store(ckpt, entry, policy=policy)
    assert result.ssts_written >= 3 and result.memtable_bytes == 256 << 10
    assert result.block_cache_bytes == 1 << 20
    batch = result.version - 1
    expected = _rows_of_partition(spark, bases[SMALL], batch, 0, {})
    assert _snapshot_rows(spark, tmp_path / "small", batch, 0, {}) == expected


def test_too_little_free_disk_is_refused_before_any_download(bases, tmp_path, monkeypatch) -> None:
    ckpt, entry = _copy_and_plan(bases[SMALL], tmp_path / "small")
    before = _files(tmp_path / "small")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(rebuild.shutil, "disk_usage", lambda _: usage._replace(free=1000))
    with pytest.raises(RebuildError, match=r"not enough free disk .*\(base x 2 \+ chain x 5 \+ 128 MiB\)"):
        rebuild_store(ckpt, entry)
    assert _files(tmp_path / "small") == before


def test_a_disk_that_fills_during_the_rebuild_stops_it_before_rocksdb_meets_it(bases, tmp_path, monkeypatch):
    """The review: a disk with room for the estimate filled during the replay, and RocksDB retried
    its flush forever while the rebuild held the lease. Under 128 MiB free between two writes,
    the rebuild stops, publishes nothing, and leaves no work folder."""
    ckpt, entry = _copy_and_plan(bases[SMALL], tmp_path / "small")
    before = _files(tmp_path / "small")
    usage, looks = shutil.disk_usage(tmp_path), []

    def filling(path):
        looks.append(path)  # the first look is the estimate's; every later one finds the disk full
        return usage._replace(free=usage.free if len(looks) == 1 else 64 << 20)

    monkeypatch.setattr(rebuild.shutil, "disk_usage", filling)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(RebuildError, match=r"filled during the rebuild .*nothing was published"):
        rebuild_store(ckpt, entry, workdir=str(work))
    assert len(looks) >= 2 and _files(tmp_path / "small") == before and not list(work.iterdir())


def test_a_killed_rebuilds_work_folder_is_removed_by_the_next(tmp_path) -> None:
    """A kill -9 leaves the work folder (a store's copies) behind: the next rebuild on this host
    removes those whose process is gone, and leaves a live one's and what it did not make."""
    import json
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    killed, live, foreign = (tmp_path / f"ckpt-rebuild-{x}" for x in "abc")
    for folder, pid in ((killed, int(dead.stdout)), (live, os.getppid())):
        (folder / "db").mkdir(parents=True)
        (folder / "owner.json").write_text(json.dumps({"host": rebuild.socket.gethostname(), "pid": pid}))
    (foreign / "db").mkdir(parents=True)
    made = rebuild.scratch(str(tmp_path))
    assert not killed.exists() and live.exists() and foreign.exists() and made.exists()
    assert json.loads((made / "owner.json").read_text())["pid"] == os.getpid()


@pytest.mark.parametrize("scan", [True, False], ids=["one scan of both", "lookups of the touched keys"])
def test_a_touched_key_the_store_got_wrong_is_caught_on_a_base(bases, tmp_path, monkeypatch, scan) -> None:
    """With a base, the store and the check are compared whole in one ordered scan, or, where the
    base holds many times the keys the chain wrote, by those keys, a batch of lookups at a time:
    either way a value the store's path got wrong shows, and nothing is published."""
    monkeypatch.setattr(rebuild, "_SCAN_WHEN_TOUCHED_OF", 10**9 if scan else 0)
    ckpt, entry = _copy_and_plan(bases[SMALL], tmp_path / "small")
    before = _files(tmp_path / "small")
    resolved = rebuild.Stores._resolved

    def one_value_wrong(self, store, runs):  # a write-path bug: each put's last value wrong
        for op, keys, values in resolved(self, store, runs):
            if store is self.db and op == "put":
                values = ([*values[0][:-1], b"not what the chain wrote"],)
            yield op, keys, values

    monkeypatch.setattr(rebuild.Stores, "_resolved", one_value_wrong)
    with pytest.raises(RebuildError, match=r"differs from an independent replay in \d+ keys"):
        rebuild_store(ckpt, entry)
    assert _files(tmp_path / "small") == before


def test_a_column_family_store_counts_the_same_scanned_or_looked_up(corpus, tmp_path, monkeypatch) -> None:
    """numKeys and numInternalKeys of a rebuilt column-family store: counted from its keys by
    family in the scan, or as the base's counts plus the touched keys' inserts and deletes."""
    counts = {}
    for scan in (True, False):
        monkeypatch.setattr(rebuild, "_SCAN_WHEN_TOUCHED_OF", 10**9 if scan else 0)
        copy_checkpoint(corpus["join_cf"], tmp_path / str(scan))
        ckpt = load_checkpoint(str(tmp_path / str(scan)))
        entries = [e for e in checkpoint_lineage(ckpt) if e.chain_length and e.base is not None]
        assert entries
        counts[scan] = [(r.keys, r.internal_keys) for r in (rebuild_store(ckpt, e) for e in entries)]
    assert counts[True] == counts[False] and all(keys for keys, _ in counts[True])
