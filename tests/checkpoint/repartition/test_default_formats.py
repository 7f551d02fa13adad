"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`), repartitioned by Spark (RocksDB V1) and refused (the HDFS-backed
store)."""

from __future__ import annotations

import pytest

from checkpoint.format.providers import Provider
from checkpoint.model.head import load_head
from tests.support.cli import ckpt
from tests.support.defaults import ROCKSDB_V1, copy_default


@pytest.mark.slow
@pytest.mark.parametrize("name", ROCKSDB_V1)
def test_rocksdb_v1_is_repartitioned_by_spark_and_restarts_like_an_untouchedcopy_default(
    ports, spark, defaults, tmp_path, name
) -> None:
    """Spark's repartitioner reads and writes RocksDB format V1 in a V1 session: 4 to 8 partitions,
    proven by the digests before and after, and by the real query restarted beside an untouched
    copy (the same output, the same state, compared without the partition a row sits in)."""
    from tests.checkpoint.repartition.test_repartition import _run, assert_restarts_like_untouched

    changed, untouched = (
        copy_default(defaults, name, tmp_path / "c"),
        copy_default(defaults, name, tmp_path / "u"),
    )
    result = _run(ports, changed, 8)
    assert (result.from_partitions, result.to_partitions) == (4, 8)
    assert result.stores and all(s.rows > 0 and s.digest_before == s.digest_after for s in result.stores)
    after = load_head(str(changed))
    assert after.format_version == 1 and after.provider == Provider.ROCKSDB
    assert ckpt("validate", str(changed)).returncode == 0
    assert_restarts_like_untouched(spark, name, defaults[name].parent, changed, untouched, tmp_path)


def test_repartition_refuses_the_hdfs_backed_store_by_name(defaults, tmp_path) -> None:
    path = copy_default(defaults, "hdfs_agg", tmp_path)
    out = ckpt("repartition", str(path), "--partitions", "8", "--audit", str(tmp_path / "audit"))
    assert out.returncode == 2 and "UNSUPPORTED_PROVIDER" in out.stderr and out.stderr.count("\n") == 1
    assert not (tmp_path / "audit" / "repartitions").exists()
