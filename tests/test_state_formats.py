"""The state formats (`checkpoint.format.states`): chosen from what a checkpoint's logs say, and
the answers the actions ask of them."""

from __future__ import annotations

import pytest

from checkpoint.format import states
from checkpoint.format.layout import FileKind
from checkpoint.format.providers import Provider
from checkpoint.format.spark import HDFS_PROVIDER, ROCKSDB_PROVIDER


@pytest.mark.parametrize(
    ("provider_class", "version", "expected"),
    [
        (HDFS_PROVIDER, 1, states.HDFS),
        (ROCKSDB_PROVIDER, 1, states.ROCKSDB_V1),
        (ROCKSDB_PROVIDER, 2, states.ROCKSDB_V2),
        # No pin: written before Spark pinned the provider, under its default; V2 is RocksDB's only.
        (None, 1, states.HDFS),
        (None, 2, states.ROCKSDB_V2),
    ],
)
def test_a_format_is_chosen_from_the_pinned_provider_and_the_version(provider_class, version, expected):
    assert states.state_format_of(provider_class, version) is expected


@pytest.mark.parametrize(
    ("provider_class", "version"),
    [("com.example.MyStateStoreProvider", 1), ("com.example.MyStateStoreProvider", 2), (HDFS_PROVIDER, 2)],
)
def test_what_spark_does_not_write_is_foreign_and_changed_by_nothing(provider_class, version) -> None:
    """A provider of someone else's, or a pair Spark never writes (the HDFS-backed store refuses
    checkpoint ids): every action that changes state files refuses it, by `spark`."""
    got = states.state_format_of(provider_class, version)
    assert not got.spark and got.version == version
    assert got.name == f"{Provider.of_class(provider_class).value} V{version}"
    assert not (got.in_rocksdb or got.snapshot_by_provider or got.compacts_while_running)


def test_each_format_answers_for_itself() -> None:
    table = {
        f.name: (f.files.base, f.files.step, f.named_by_commits, f.sidecars, f.compacts_while_running,
                 f.snapshot_by_provider, f.repartition_refused is not None, f.migration_refused is not None)
        for f in states.KNOWN.values()
    }  # fmt: skip
    z, c, s, d = FileKind.ZIP, FileKind.CHANGELOG, FileKind.SNAPSHOT, FileKind.DELTA
    assert table == {
        "hdfs V1": (s, d, False, False, False, True, True, False),
        "rocksdb V1": (z, c, False, False, False, False, False, False),
        "rocksdb V2": (z, c, True, True, True, False, False, True),
    }
    # A fork proves a copy against Spark's sidecar where there is one, else by decoding it.
    assert states.ROCKSDB_V2.fork_decode(FileKind.ZIP) is None
    assert states.HDFS.fork_decode(FileKind.DELTA) == FileKind.DELTA


def _logs(root, batches: dict[int, tuple[str | None, bool]]) -> None:
    """Offset and commit files as Spark writes them: per batch, the provider its offset pins (None:
    no pin) and whether its commit is format V2's (`v2`, with ids)."""
    import json

    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, (provider, v2) in batches.items():
        conf = {} if provider is None else {"spark.sql.streaming.stateStore.providerClass": provider}
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": conf}
        (root / "offsets" / str(batch)).write_text(f'v1\n{json.dumps(meta)}\n{{"logOffset":{batch}}}')
        ids = {"stateUniqueIds": {"0": [[f"00000000-0000-0000-0000-{batch:012d}"]]}} if v2 else {}
        commit = {"nextBatchWatermarkMs": 0, **ids}
        (root / "commits" / str(batch)).write_text(f"{'v2' if v2 else 'v1'}\n{json.dumps(commit)}")


def test_a_migrated_checkpoint_has_its_format_per_batch(tmp_path) -> None:
    """`ckpt migrate`'s copy keeps the source's logs up to the migration batch: those batches are
    in the source's format and are history; the checkpoint's own format is its head's."""
    from checkpoint.model import load_checkpoint, maintained_batches

    _logs(tmp_path, {0: (HDFS_PROVIDER, False), 1: (None, False), 2: (ROCKSDB_PROVIDER, True),
                     3: (None, True)})  # fmt: skip
    ckpt = load_checkpoint(str(tmp_path), strict=False)
    assert ckpt.states is states.ROCKSDB_V2
    hdfs, v2 = states.HDFS, states.ROCKSDB_V2
    assert [ckpt.states_at(b) for b in range(4)] == [hdfs, hdfs, v2, v2]
    assert maintained_batches(ckpt) == [2, 3]


def test_a_provider_that_differs_alone_makes_no_history(tmp_path) -> None:
    """An older offset that pins another provider under V2 commits is no format Spark writes: that
    batch is foreign, and still maintained, since calling it history would let cleanup keep less."""
    from checkpoint.model import load_checkpoint, maintained_batches

    _logs(tmp_path, {0: (HDFS_PROVIDER, True), 1: (ROCKSDB_PROVIDER, True)})
    ckpt = load_checkpoint(str(tmp_path), strict=False)
    assert not ckpt.states_at(0).spark and ckpt.states_at(1) is states.ROCKSDB_V2
    assert maintained_batches(ckpt) == [0, 1]
