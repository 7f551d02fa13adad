"""Compaction's one flow, which `ckpt compact` and the Dagster asset only translate into: each
checkpoint under its lease (`checkpoint.safety.InPlace`), read at its newest two batches (a live
query is compacted at the batch below the newest, nothing else is read), planned; then every
planned store of them rebuilt by the injected `rebuild` (Spark's job, one task a store), each
store's publish behind its own checkpoint's lease check."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Generic, TypeVar

from checkpoint.compaction.targets import CompactionPlanOptions, Skip, Target, plan_compaction
from checkpoint.errors import CheckpointError, CompactionDeferred
from checkpoint.model import Checkpoint, StoreId, StoreLineage, checkpoint_lineage, load_head
from checkpoint.progress import Progress, report
from checkpoint.safety import EachInPlace

log = logging.getLogger(__name__)
PROGRESS_SECONDS = 10.0  # between the planning's progress lines, its first and last apart
clock = time.monotonic  # a test moves it by hand

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
    on past them), one outcome per rebuilt store, in the order of the plans, and each planned
    checkpoint's replay chains once compacted, by its name, read back under its lease."""

    planned: tuple[Planned, ...]
    refused: tuple[Refusal, ...]
    outcomes: tuple[Outcome, ...]
    chains_after: dict[str, dict[StoreId, int]]


@dataclass(frozen=True)
class CompactionOptions(Generic[Outcome]):
    rebuild: Rebuild[Outcome]  # the rebuild of the planned stores (Spark's job: `jobs.compact`)
    plan: CompactionPlanOptions = CompactionPlanOptions()  # each checkpoint's plan
    strict: bool = True  # the checkpoints read as validation reads them, a damaged file refusing
    # A backfill goes on past a checkpoint it cannot read, lease or plan (reported in `refused`),
    # and skips a running format V1 query; one checkpoint asked for by name raises instead.
    go_on: bool = False
    what: str = "compact"  # what the leases say they are held for


def tasks_for(ckpt: Checkpoint, targets: Sequence[Target]) -> list[Task]:
    """Each target's task: the checkpoint narrowed to that store's files, and its lineage entry."""
    return [(ckpt.for_store(t.entry.store), t.entry) for t in targets]


def compact_checkpoints(request: EachInPlace, options: CompactionOptions[Outcome]) -> Compaction[Outcome]:
    """Compacts the checkpoints of `request` through their doors, their leases held until every
    store is done and its chain read back.

    Without `go_on` (one checkpoint asked for by name) any refusal raises, a running format V1
    query's (CompactionDeferred) included. With it (a backfill) a checkpoint that cannot be read,
    leased or planned is reported in `refused` and holds back no other, and a running V1 query is
    skipped: it is compacted once stopped. `rebuild` runs only when some store is planned."""
    o = options
    planned: list[Planned] = []
    refused: list[Refusal] = []
    checks: dict[str, Callable[[], None]] = {}
    # Said first: each checkpoint's head-first reads log their own progress lines before any
    # store is rebuilt, and a run's log should say what they are for.
    total = len(request.names)
    log.info("compaction of %d checkpoint(s): each read at its newest two batches and planned", total)
    said_at = -PROGRESS_SECONDS
    with ExitStack() as held:
        for at, name in enumerate(request.names, 1):
            try:
                door = request.door(name)  # a name that names no checkpoint is refused like one unread
                check = held.enter_context(door.held(o.what))
                ckpt = load_head(door.storage, strict=o.strict, recent=2)
                checks[ckpt.url] = check
                planned.append(_plan(name, ckpt, o))
                said = _planned(planned[-1])
            except CheckpointError as exc:
                if not o.go_on:
                    raise
                refused.append(Refusal(name, str(exc)))
                said = f"refused: {exc}"
            # A batch of 500 says where it is every few seconds, not 500 times.
            if at in (1, total) or clock() - said_at >= PROGRESS_SECONDS:
                said_at = clock()
                progress = Progress("checkpoints planned", at, total)
                report(log, progress, "%d of %d checkpoint(s) planned: %s, %s", at, total, name, said)
        tasks = [task for p in planned for task in tasks_for(p.ckpt, p.targets)]
        outcomes = o.rebuild(tasks, lambda ckpt: checks[ckpt.url]()) if tasks else []
        after = {p.name: _chains_after(p) for p in planned if p.targets}
    return Compaction(tuple(planned), tuple(refused), tuple(outcomes), after)


def _planned(p: Planned) -> str:
    if not p.targets and any(skip.operator == -1 for skip in p.skips):  # `_plan`'s deferral
        return "deferred: a running format V1 query, compacted once stopped"
    return f"{len(p.targets)} store(s) to compact"


def _chains_after(planned: Planned) -> dict[StoreId, int]:
    """Each store's replay chain at the planned batch, read back from the checkpoint."""
    batch = planned.targets[0].entry.batch
    reloaded = load_head(planned.ckpt.storage, strict=True, batches=[batch])
    return {e.store: e.chain_length for e in checkpoint_lineage(reloaded, batch)}


def _plan(name: str, ckpt: Checkpoint, options: CompactionOptions) -> Planned:
    try:
        plan = plan_compaction(ckpt, options.plan)
    except CompactionDeferred as exc:
        if not options.go_on:
            raise
        return Planned(name, ckpt, (), (Skip(-1, -1, "*", str(exc)),))
    return Planned(name, ckpt, plan.targets, plan.skips)
