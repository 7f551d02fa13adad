"""Progress of long work (listing, head-first reads, copying, compaction) as log records that an
adapter renders: each carries `progress` (what, done, total or None) beside its message. The CLI
draws a bar from it on a terminal and writes the message as a log line elsewhere; Dagster shows the
message in the run's logs. The core draws nothing."""

from __future__ import annotations

import logging
from typing import NamedTuple


class Progress(NamedTuple):
    what: str  # "files listed", "stores read", ...: one bar per kind of work
    done: int
    total: int | None  # None while the end is unknown (a listing)


def report(log: logging.Logger, progress: Progress, message: str, *args: object) -> None:
    log.info(message, *args, extra={"progress": progress})
