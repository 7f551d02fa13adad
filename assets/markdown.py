"""Markdown tables for Dagster metadata (the UI renders them), drawn by tabulate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tabulate import tabulate


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    # A `|` inside a cell would end it early: shown as `/`.
    cells = [["-" if c is None else str(c).replace("|", "/") for c in row] for row in rows]
    return tabulate(cells, headers=list(header), tablefmt="github", disable_numparse=True)
