"""Files and bytes per key, counted as a plan streams its candidates and as an apply records them."""

from __future__ import annotations


class Totals:
    """Files and bytes per key (a reason, a store), one file at a time: a plan streams its
    candidates, so it keeps these and never the list."""

    def __init__(self) -> None:
        self._by: dict[str, dict[str, int]] = {}

    def add(self, key: str | None, size: int, files: int = 1) -> None:
        entry = self._by.setdefault(key or "-", {"files": 0, "bytes": 0})
        entry["files"] += files
        entry["bytes"] += size

    def merge(self, other: Totals) -> None:
        for key, entry in other._by.items():
            self.add(key, entry["bytes"], entry["files"])

    def as_dict(self) -> dict[str, dict[str, int]]:
        return dict(sorted(self._by.items()))
