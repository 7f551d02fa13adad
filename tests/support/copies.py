"""Copies of real checkpoints as a test needs them: stopped a given time ago, whatever the age of
the cache they come from."""

from __future__ import annotations

from pathlib import Path

from testbed.clock import date_to
from testbed.copying import copy_checkpoint


def stopped_copy(source: Path, dest: Path, age_seconds: float) -> Path:
    """A copy of the checkpoint at `source` whose newest file is `age_seconds` old: its query
    stopped that long ago (past the quiet period at an hour and more, dormant at a week)."""
    copy_checkpoint(source, dest)
    date_to(dest, age_seconds)
    return dest
