"""A killed run's lease made to have lapsed, without waiting for its TTL on the wall clock.

A test that kills a run and checks that the next one is refused gives the lease a TTL far longer
than the next run's start can take on a loaded machine, then lapses it here: its record says it
expired, and its file was last written a day ago, as both clocks a takeover consults would see it
once the TTL had passed (checkpoint/safety/lease.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from checkpoint.format.layout import AUDIT_FOLDER

_A_DAY = 86_400.0


def lapse_leases(root: Path) -> int:
    """Every lease generation in the audit folder beside the checkpoints under `root` (or beside
    `root` itself) made expired; returns how many, and fails when there is none to lapse."""
    records = [p for folder in (root, root.parent) for p in (folder / AUDIT_FOLDER).glob("*/lease/*.json")]
    then = time.time() - _A_DAY
    for path in records:
        holder = json.loads(path.read_text())
        holder["started"] = min(holder["started"], then)
        holder["expires"] = then
        path.write_text(json.dumps(holder))
        os.utime(path, (then, then))
    assert records, f"no lease under {root} to lapse"
    return len(records)
