"""What a number handed to this tool from outside may be: a CLI flag, a run config, a manifest, a
record in the audit trail, a sensor's cursor. JSON and Python accept NaN, infinities, integers of
a thousand digits and `true` where a count is meant; each of them has passed a `<` that should
have refused it (`max(NaN, x)` is NaN, and `now < NaN` is false). Every reader of such a number
goes through one of these, and gets a finite number in range or `OutOfRange`.

`OutOfRange` is a ValueError, so a reader that turns malformed input into its own refusal
(`errors.MALFORMED`) refuses these too."""

from __future__ import annotations

import math
from typing import Any

# A count of files or bytes, a batch id: what a signed 64-bit field holds (Spark's longs).
MAX_COUNT = (1 << 63) - 1
# A time as seconds since the epoch: from 1970 to the year 2200. A purge time, a plan's time or a
# dormancy's start outside that is no time any checkpoint was written at.
MAX_INSTANT = 7_258_118_400.0
# A duration (a grace, a quiet period, a timeout): at most a century.
MAX_SECONDS = 100 * 365 * 86400.0


class OutOfRange(ValueError):
    """A number that is not finite, not of its kind (a bool for a count), or out of its range."""


def count(value: Any, what: str, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """An int in [low, high]; a bool, a float or a string is refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OutOfRange(f"{what} is {_shown(value)}, not a whole number")
    if not low <= value <= high:
        raise OutOfRange(f"{what} is {_shown(value)}, outside {low} to {high}")
    return value


def real(value: Any, what: str, *, low: float, high: float) -> float:
    """A finite int or float in [low, high], as a float; a bool is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OutOfRange(f"{what} is {_shown(value)}, not a number")
    try:
        number = float(value)
    except OverflowError as exc:  # an int too large for a float
        raise OutOfRange(f"{what} is {_shown(value)}, outside {low:g} to {high:g}") from exc
    if not math.isfinite(number):
        raise OutOfRange(f"{what} is {number}, not a finite number")
    if not low <= number <= high:
        raise OutOfRange(f"{what} is {_shown(value)}, outside {low:g} to {high:g}")
    return number


def instant(value: Any, what: str) -> float:
    """Seconds since the epoch, between 1970 and 2200."""
    return real(value, what, low=0.0, high=MAX_INSTANT)


def optional_instant(value: Any, what: str) -> float | None:
    return None if value is None else instant(value, what)


def seconds(value: Any, what: str, *, low: float = 0.0, high: float = MAX_SECONDS) -> float:
    """A duration in seconds, at most a century."""
    return real(value, what, low=low, high=high)


def _shown(value: Any) -> str:
    """The value as an error message shows it: a number of a thousand digits cut short (Python
    refuses to print one of over 4,300)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"a whole number of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
