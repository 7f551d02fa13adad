"""Backfills in batches: every partitioned asset takes a range of checkpoints in one run.

Dagster splits a UI backfill into runs of at most `RANGE` partitions (`BATCHED`), so "all
partitions" of 10,000 checkpoints is 20 runs. A run over a range materializes every partition in
it with one result: its metadata holds a row per checkpoint; one blocking check result stands for
the range, failing if any checkpoint fails it. A run over one partition says what it always said.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import dagster as dg

from assets import markdown
from checkpoint.errors import CheckpointError
from checkpoint.policy import POLICY

RANGE = POLICY.validation_run_max_checkpoints
BATCHED = dg.BackfillPolicy.multi_run(max_partitions_per_run=RANGE)

T = TypeVar("T")


def each_checkpoint(
    keys: Sequence[str], work: Callable[[str], T], failing: str = "cannot be read"
) -> dict[str, T]:
    """`work` for every checkpoint of the run. One it refuses (`failing` says how) holds back no
    other, and then fails the run, named with every other one refused: a range is materialized
    whole or not at all (what was done is in each checkpoint's audit trail)."""
    done: dict[str, T] = {}
    unread: list[tuple[str, str]] = []
    for key in keys:
        try:
            done[key] = work(key)
        except CheckpointError as exc:
            unread.append((key, str(exc)))
    if unread:
        first = f"checkpoint {unread[0][0]} {failing}: {unread[0][1]}"
        if len(keys) == 1:
            raise dg.Failure(description=first)
        raise dg.Failure(
            description=f"{len(unread)} of {len(keys)} checkpoint(s) {failing}; the first: {first}",
            metadata={"refused": dg.MetadataValue.md(markdown.table(("checkpoint", "why"), unread))},
        )
    return done


PER_CHECKPOINT = "per_checkpoint"  # a range's metadata: each checkpoint's own figures, by key


def per_checkpoint(values: Mapping[str, Mapping[str, object]]) -> dg.MetadataValue:
    """Each checkpoint's own figures, which readers of one partition (the fleet report, the
    cleanup's apply) take over the range's totals (`value_for`)."""
    return dg.MetadataValue.json({key: dict(v) for key, v in values.items()})


def value_for(metadata: Mapping[str, object], key: str, name: str) -> object:
    """`name` of checkpoint `key` in a materialization's metadata: its own figure when the
    materialization covered a range, else the entry itself. None when absent."""
    ranged = getattr(metadata.get(PER_CHECKPOINT), "value", None)
    if isinstance(ranged, dict):
        own = ranged.get(key)
        return own.get(name) if isinstance(own, dict) else None
    return getattr(metadata.get(name), "value", None)


def range_table(header: Sequence[str], rows: Mapping[str, Sequence[object]]) -> dg.MetadataValue:
    """A row per checkpoint of the range (at most `RANGE`: every one is shown)."""
    return dg.MetadataValue.md(markdown.table(("checkpoint", *header), [(k, *r) for k, r in rows.items()]))
