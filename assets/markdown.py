"""Markdown tables for Dagster metadata (the UI renders them), drawn by tabulate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tabulate import tabulate

from checkpoint.analysis import printable


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    # A `|` inside a cell would end it early: shown as `/`; a control character (a newline in a
    # folder's name) would end the row: escaped.
    cells = [["-" if c is None else printable(str(c)).replace("|", "/") for c in row] for row in rows]
    return tabulate(cells, headers=list(header), tablefmt="github", disable_numparse=True)
