"""Compaction's one flow, which `ckpt compact` and the Dagster asset only translate into: each
checkpoint under its lease (`checkpoint.safety.InPlace`), read at its newest two batches (a live
query is compacted at the batch below the newest, nothing else is read), planned; then every
planned store of them rebuilt by the injected `rebuild` (Spark's job, one task a store), each
store's publish behind its own checkpoint's lease check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Generic, TypeVar

from checkpoint.compaction.targets import Skip, Target, plan_compaction
from checkpoint.errors import CheckpointError, CompactionDeferred
from checkpoint.model import Checkpoint, StoreLineage, load_head
from checkpoint.safety import InPlace

# What one rebuild task needs, planned on the driver: no task loads or lists the checkpoint.
Task = tuple[Checkpoint, StoreLineage]
Outcome = TypeVar("Outcome")
# Rebuilds the tasks, calling `check(checkpoint)` before each store it publishes; one outcome a task.
Rebuild = Callable[[list[Task], Callable[[Checkpoint], None]], list[Outcome]]


@dataclass(frozen=True)
class Planned:
    """One checkpoint as planned: `name` is the adapter's (a path, a partition key)."""

    name: str
    ckpt: Checkpoint
    targets: tuple[Target, ...]
    skips: tuple[Skip, ...]


@dataclass(frozen=True)
class Refusal:
    """A checkpoint not compacted, by the adapter's name, and why."""

    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.name}: {self.why}"


@dataclass(frozen=True)
class Compaction(Generic[Outcome]):
    """What a compaction did: the checkpoints planned, those refused (only when the caller goes
    on past them), and one outcome per rebuilt store, in the order of the plans."""

    planned: tuple[Planned, ...]
    refused: tuple[Refusal, ...]
    outcomes: tuple[Outcome, ...]


def tasks_for(ckpt: Checkpoint, targets: Sequence[Target]) -> list[Task]:
    """Each target's task: the checkpoint narrowed to that store's files, and its lineage entry."""
    return [(ckpt.for_store(t.entry.store), t.entry) for t in targets]


def compact_checkpoints(
    names: Sequence[str],
    door: Callable[[str], InPlace],
    what: str,
    rebuild: Rebuild[Outcome],
    *,
    min_chain: int,
    quiet_seconds: float,
    strict: bool,
    go_on: bool,
) -> Compaction[Outcome]:
    """Compacts the checkpoints `names` (what the adapter calls them: paths, partition keys) through
    their `door`, their leases held until every store is done.

    Without `go_on` (one checkpoint asked for by name) any refusal raises, a running format V1
    query's (CompactionDeferred) included. With it (a backfill) a checkpoint that cannot be read,
    leased or planned is reported in `refused` and holds back no other, and a running V1 query is
    skipped: it is compacted once stopped. `rebuild` runs only when some store is planned."""
    planned: list[Planned] = []
    refused: list[Refusal] = []
    checks: dict[str, Callable[[], None]] = {}
    with ExitStack() as held:
        for name in names:
            try:
                request = door(name)  # a name that names no checkpoint is refused like one unread
                check = held.enter_context(request.held(what))
                ckpt = load_head(request.storage, strict=strict, recent=2)
                checks[ckpt.url] = check
                planned.append(_plan(name, ckpt, min_chain, quiet_seconds, go_on))
            except CheckpointError as exc:
                if not go_on:
                    raise
                refused.append(Refusal(name, str(exc)))
        tasks = [task for p in planned for task in tasks_for(p.ckpt, p.targets)]
        outcomes = rebuild(tasks, lambda ckpt: checks[ckpt.url]()) if tasks else []
    return Compaction(tuple(planned), tuple(refused), tuple(outcomes))


def _plan(name: str, ckpt: Checkpoint, min_chain: int, quiet_seconds: float, go_on: bool) -> Planned:
    try:
        targets, skips = plan_compaction(ckpt, min_chain=min_chain, quiet_seconds=quiet_seconds)
    except CompactionDeferred as exc:
        if not go_on:
            raise
        return Planned(name, ckpt, (), (Skip(-1, -1, "*", str(exc)),))
    return Planned(name, ckpt, tuple(targets), tuple(skips))
