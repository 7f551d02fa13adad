"""The corpus of Spark's default formats (`testbed.defaults`) as the tests of each action use it:
its checkpoints by format, a private copy of one, its findings by code, the state reader's session."""

from __future__ import annotations

import os
from pathlib import Path

from checkpoint.analysis.checks import ValidationOptions, validate
from checkpoint.model.checkpoint import load_checkpoint
from testbed.copying import copy_checkpoint

HDFS = ("hdfs_agg", "hdfs_deltas", "hdfs_dedup", "hdfs_dedup_watermark", "hdfs_join", "hdfs_window",
        "hdfs_session", "hdfs_pandas", "hdfs_retry", "hdfs_killed_before_restart",
        "hdfs_killed_after_restart")  # fmt: skip


ROCKSDB_V1 = ("rocksdb_v1", "rocksdb_v1_changelog")


def copy_default(defaults, name: str, tmp_path: Path) -> Path:
    path = tmp_path / name
    copy_checkpoint(defaults[name], path)
    return path


def codes_of(path: Path, deep: bool = False) -> dict[str, list[str]]:
    findings = validate(load_checkpoint(str(path), strict=False), ValidationOptions(deep=deep)).findings
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(f.code, []).append(f.message)
    return out


V1_SESSION = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "1"}  # the state reader's


def chain_from_names(store: Path, version: int, base_ext: str, step_ext: str) -> tuple[int, list[int]]:
    """What Spark's recovery of `version` reads, from the folder's names alone: the newest base at
    or below it, then every step after."""
    names = os.listdir(store)
    bases = [int(n.split(".")[0]) for n in names if n.endswith(f".{base_ext}") and not n.startswith(".")]
    base = max((v for v in bases if v <= version), default=0)
    return base, list(range(base + 1, version + 1))
