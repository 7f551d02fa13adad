"""Progress of long work for a person: the core and the Spark jobs report it as log records that
carry `progress` (checkpoint.progress); here they become one tqdm bar per kind of work on a
terminal, cleared before the result prints, or plain log lines on stderr when it is not one."""

from __future__ import annotations

import logging
from typing import TextIO

from tqdm import tqdm

from checkpoint.progress import Progress

LOGGERS = ("checkpoint", "jobs")


class ProgressDisplay(logging.Handler):
    def __init__(self, stream: TextIO, *, terminal: bool) -> None:
        super().__init__(logging.INFO)
        self.stream, self.terminal = stream, terminal
        self.bars: dict[str, tqdm] = {}

    def emit(self, record: logging.LogRecord) -> None:
        progress: Progress | None = getattr(record, "progress", None)
        if progress is None:
            return  # only progress is shown; everything else stays in the logs
        if not self.terminal:
            self.stream.write(f"ckpt: {record.getMessage()}\n")
            self.stream.flush()
            return
        bar = self.bars.get(progress.what)
        if bar is None:
            bar = tqdm(desc=progress.what, total=progress.total, file=self.stream, leave=False, unit="")
            self.bars[progress.what] = bar
        # The core already reports only every so many items: each report is drawn.
        bar.total, bar.n = progress.total, progress.done
        bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()  # leave=False: the bar's line is cleared
        self.bars.clear()
        super().close()


class shown:
    """Shows the progress of the work inside the block (no-op with `quiet`)."""

    def __init__(self, stream: TextIO, *, quiet: bool) -> None:
        self.display = None if quiet else ProgressDisplay(stream, terminal=stream.isatty())

    def __enter__(self) -> shown:
        if self.display is not None:
            for name in LOGGERS:
                logger = logging.getLogger(name)
                logger.addHandler(self.display)
                logger.setLevel(logging.INFO)
        return self

    def finish(self) -> None:
        """Clears the bars before a result or an error prints."""
        if self.display is not None:
            for name in LOGGERS:
                logging.getLogger(name).removeHandler(self.display)
            self.display.close()
            self.display = None

    def __exit__(self, *exc: object) -> None:
        self.finish()
