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
