"""What the commit sensor and the schedules ask for, as tests read it: the checkpoints of each
batched run."""

from __future__ import annotations

import dagster as dg


def checkpoints_of(request: dg.RunRequest) -> list[str]:
    """The checkpoints one requested run works on: its batch, or its partition."""
    ops = (request.run_config or {}).get("ops", {})
    for op in ("maintain_each", "validate_each"):
        if op in ops:
            return list(ops[op]["config"]["partitions"])
    return [request.partition_key] if request.partition_key else []


def batches_of(result, kind: str = "compaction") -> list[list[str]]:
    """The checkpoints of each batched run of `kind` (ckpt/kind) a tick asked for, in order."""
    runs = result.run_requests if isinstance(result, dg.SensorResult) else result or ()
    return [checkpoints_of(r) for r in runs if r.tags.get("ckpt/kind") == kind]
