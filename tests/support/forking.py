"""The fork through its door on leases nobody holds (`safety.held_by` of a check that passes): what
the tests of the copy count (files, bytes, requests) without lease files in SRC and DEST. The
door's leases are tested in `tests/checkpoint/safety/test_door.py` and through the CLI and
Dagster."""

from __future__ import annotations

from typing import Any

from checkpoint.fork import ForkOptions, ForkResult, fork_checkpoint
from checkpoint.safety import TwoSided, held_by
from checkpoint.storage import Storage


def fork(src: Storage, dest: Storage, batch: int | None = None, **options: Any) -> ForkResult:
    return fork_checkpoint(TwoSided(src, dest, held_by(lambda: None)), ForkOptions(batch=batch, **options))
