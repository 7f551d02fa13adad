"""What the commit sensor and the schedules ask for, as tests read it: the checkpoints of each
batched run."""

from __future__ import annotations

import dagster as dg


def batches_of(result, kind: str = "compaction") -> list[list[str]]:
    """The checkpoints of each batched run of `kind` (ckpt/kind) a tick asked for, in order."""
    runs = result.run_requests if isinstance(result, dg.SensorResult) else result or ()
    ops = ("maintain_each", "validate_each")
    return [
        next(r.run_config["ops"][op]["config"]["partitions"] for op in ops if op in r.run_config["ops"])
        for r in runs
        if r.tags.get("ckpt/kind") == kind
    ]
