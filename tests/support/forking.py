"""The fork's copy alone, under no lease (`checkpoint.fork.copy.fork_under`): what the tests of
the copy count (files, bytes, requests) without the door's lease files. The door itself is
tested in `tests/checkpoint/safety/test_door.py` and through the CLI and Dagster."""

from __future__ import annotations

from typing import Any

from checkpoint.fork import ForkOptions, ForkResult
from checkpoint.fork.copy import fork_under
from checkpoint.storage import Storage


def fork(src: Storage, dest: Storage, batch: int | None = None, **options: Any) -> ForkResult:
    return fork_under(src, dest, ForkOptions(batch=batch, **options), lambda: None)
