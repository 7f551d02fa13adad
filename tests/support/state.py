"""Reading a checkpoint's state through Spark's state data source, for before/after comparisons."""

from __future__ import annotations

from pathlib import Path

# The reader options that cover every store of a corpus scenario.
READERS: dict[str, list[dict[str, str]]] = {
    "dedup_agg": [{"operatorId": "0"}, {"operatorId": "1"}],
    "join": [{"joinSide": "left"}, {"joinSide": "right"}],
    "join_cf": [{"joinSide": "left"}, {"joinSide": "right"}],
    "list_state": [{"stateVarName": "items"}],
}


def read_state(spark, path: Path, batch: int, scenario: str) -> list[str] | str:
    """Sorted rows of every store at a batch, or the error class when Spark cannot load it."""
    rows: list[str] = []
    for options in READERS.get(scenario, [{}]):
        reader = spark.read.format("statestore").option("batchId", batch)
        for key, value in options.items():
            reader = reader.option(key, value)
        try:
            rows += [f"{options}:{r!r}" for r in reader.load(str(path)).collect()]
        except Exception as exc:  # noqa: BLE001 - a load failure is a result to compare, not a test error
            return f"unreadable: {type(exc).__name__}"
    return sorted(rows)
