"""The wall clock moved on by hand, for code that reads `time.time()` through its module's `time`."""

from __future__ import annotations

import time


class ShiftedTime:
    """`time` as a module uses it (`time.time()`, `time.monotonic()`), the wall clock `offset`
    seconds ahead: a checkpoint written now reads as written that long ago."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def time(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic()
