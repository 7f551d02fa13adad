"""Compaction's Spark job alone, under no lease: what the tests of the rebuild count (stores,
chains, outcomes) without the door's lease files. The door itself, `compact_checkpoint`, is tested
in `tests/checkpoint/compaction/test_compaction_flow.py`, and through the CLI and Dagster."""

from __future__ import annotations

from typing import Any

from checkpoint.compaction import Target, tasks_for
from checkpoint.model import Checkpoint
from jobs.compact import StoreOutcome, run_compaction_tasks


def compact_unleased(spark: Any, ckpt: Checkpoint, targets: list[Target]) -> list[StoreOutcome]:
    """Every target of one checkpoint rebuilt, one Spark job per store."""
    return run_compaction_tasks(spark, tasks_for(ckpt, targets), check=lambda _: None)
