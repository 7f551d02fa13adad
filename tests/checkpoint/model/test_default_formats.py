"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`), read: the corpus, their replay chains as recovery replays them by
the file names, head-first reads that cost what recovery reads, Spark reading the computed chain,
the provider told from the offset log."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.analysis.checks import ValidationOptions, validate
from checkpoint.format import states
from checkpoint.format.layout import FileKind
from checkpoint.format.providers import Provider
from checkpoint.model.checkpoint import Scope, load_checkpoint
from checkpoint.model.head import load_head
from checkpoint.model.lineage import checkpoint_lineage
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from tests.support.damage import remove
from tests.support.defaults import HDFS, ROCKSDB_V1, V1_SESSION, chain_from_names, copy_default


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


def test_the_chain_is_what_recovery_replays_by_the_file_names(defaults) -> None:
    for name, path in defaults.items():
        ckpt_ = load_checkpoint(str(path))
        exts = ("snapshot", "delta") if ckpt_.provider == Provider.HDFS else ("zip", "changelog")
        for entry in checkpoint_lineage(ckpt_):
            folder = path / "state" / str(entry.store.operator) / str(entry.store.partition)
            folder = folder if entry.store.store == "default" else folder / entry.store.store
            base, steps = chain_from_names(folder, entry.version, *exts)
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


@pytest.mark.parametrize("name", ["hdfs_agg", "hdfs_dedup", "rocksdb_v1_changelog"])
def test_spark_reads_the_computed_chain_and_nothing_else(ports, spark, defaults, tmp_path, name) -> None:
    """Spark's state data source loads the same rows from a copy that holds only the computed base
    and chain of every store, and fails once one file of a chain is gone."""
    from tests.support.state import StateUnreadable, read_state

    path = copy_default(defaults, name, tmp_path)
    ckpt_ = load_checkpoint(str(path))
    batch = ckpt_.latest_committed_batch
    lineage = checkpoint_lineage(ckpt_)
    needed = {f.rel for e in lineage for f in (e.base, *e.chain) if f is not None}
    with ports.confs(V1_SESSION):
        before = read_state(spark, path, batch, name)
        pruned = copy_default(defaults, name, tmp_path / "pruned")
        state_kinds = {FileKind.ZIP, FileKind.CHANGELOG, FileKind.DELTA, FileKind.SNAPSHOT}
        gone = [f.rel for f in ckpt_.files if f.kind in state_kinds and f.rel not in needed]
        for rel in gone:
            remove(pruned / rel)
        assert gone and before and read_state(spark, pruned, batch, name) == before
        entry = next(e for e in lineage if e.chain)
        broken = copy_default(defaults, name, tmp_path / "broken")
        remove(broken / entry.chain[0].rel)
        with pytest.raises(StateUnreadable):
            read_state(spark, broken, batch, name)


def test_the_provider_comes_from_the_offset_log_and_format_v2_is_rocksdb(defaults, tmp_path) -> None:
    """An offset file that names no provider predates the pin: Spark's default then, the
    HDFS-backed store, but never for format V2, which only RocksDB writes."""
    from testbed import synthetic

    v2 = tmp_path / "v2"
    synthetic.build(v2, 1, 12, window=4)  # offsets with an empty conf, format V2 ids
    assert load_head(str(v2)).provider == Provider.ROCKSDB
    assert validate(load_head(str(v2), strict=False)).ok
    hdfs = copy_default(defaults, "hdfs_agg", tmp_path)
    for offsets in (hdfs / "offsets").glob("[0-9]*"):
        offsets.write_text(offsets.read_text().replace("HDFSBackedStateStoreProvider", "Unpinned"))
        text = offsets.read_text()
        offsets.write_text(text.replace('"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.'
                                        'execution.streaming.state.Unpinned",', ""))  # fmt: skip
    ckpt_ = load_checkpoint(str(hdfs))
    assert ckpt_.provider_class is None and ckpt_.provider == Provider.HDFS
