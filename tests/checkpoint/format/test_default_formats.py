"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`), named: Spark's temp files told apart."""

from __future__ import annotations

from checkpoint.format.layout import FileKind, classify


def test_spark_temp_files_are_told_apart() -> None:
    uid = "0a1b2c3d-0000-4000-8000-000000000000"
    assert classify(f"state/0/1/.7.delta.{uid}.TID12.tmp").kind == FileKind.SPARK_TEMP
    assert classify(f"commits/.7.{uid}.tmp").kind == FileKind.SPARK_TEMP
    assert classify(f"state/0/1/7_{uid}.delta").kind == FileKind.UNKNOWN  # the HDFS-backed store has no ids
    assert classify(f"elsewhere/.7.{uid}.tmp").kind == FileKind.UNKNOWN
