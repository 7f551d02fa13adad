"""What the commit sensor asks for in one tick: only work that is due, batched and capped.

Pure: the sensor gathers what it looked at (one shallow listing of `commits/` per checkpoint, and
for a new commit the head-first plan the compaction asset itself makes) and what Dagster's queue
holds; this decides. Tests drive it with a manual clock.

- Compaction is due when a new commit's plan has targets (a chain over the threshold, a header near
  the cap). Crossings are kept in the cursor until served, oldest first; none is dropped while the
  queue is full. A checkpoint whose compaction run is already queued or running gets no second one.
  One run per checkpoint, since a run takes the checkpoint's lease.
- Validation is due for a checkpoint with a commit not yet validated, at most once per period, or at
  once when the new batch's own check found an error. Every checkpoint due in a tick goes into one
  run (split only past `max_per_validation_run`). A compaction run validates first, so it counts.
- Per job, no more runs are requested than the queue has room for, and no more than
  `max_runs_per_tick` in all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Look:
    """One checkpoint as this tick saw it."""

    latest: int | None  # newest committed batch
    new: bool = False  # a commit since the last tick
    crossing: bool = False  # the new batch's compaction plan has targets
    error: bool = False  # the new batch's own check found an error finding
    problem: str | None = None  # could not be read this tick: its state is kept as it was


@dataclass(frozen=True)
class Caps:
    max_runs_per_tick: int
    max_queued_per_job: int
    validation_period_seconds: float
    max_per_validation_run: int


@dataclass
class SensorState:
    """The cursor: what was seen, and the work found but not yet requested."""

    seen: dict[str, int] = field(default_factory=dict)  # newest committed batch looked at
    validated: dict[str, float] = field(default_factory=dict)  # when its last validation was requested
    unvalidated: dict[str, float] = field(default_factory=dict)  # a commit not validated yet, since
    crossings: dict[str, float] = field(default_factory=dict)  # compaction due, since
    urgent: list[str] = field(default_factory=list)  # an error found: validate at once

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> SensorState:
        if not text:
            return cls()
        raw = json.loads(text)
        if raw and all(isinstance(v, int) for v in raw.values()):
            return cls(seen=dict(raw))  # the cursor of releases before this one: seen batches only
        return cls(**{k: raw.get(k, type(v)()) for k, v in cls().__dict__.items()})


@dataclass(frozen=True)
class TickPlan:
    compact: tuple[tuple[str, int], ...]  # (partition key, batch), oldest crossing first
    validate: tuple[tuple[str, ...], ...]  # one tuple of partition keys per validation run
    state: SensorState
    waiting: str  # what is due but not requested, and why ("" when nothing waits)


def plan_tick(
    before: SensorState,
    looks: dict[str, Look],
    now: float,
    caps: Caps,
    queued: dict[str, int],
    compacting: set[str],
) -> TickPlan:
    """`looks` covers every partition (those missing drop out of the state); `queued` counts runs
    waiting in Dagster's queue per kind ("compact", "validate"); `compacting` names the partitions
    whose compaction run is queued or running."""
    keep = set(looks)
    state = SensorState(
        seen={k: v for k, v in before.seen.items() if k in keep},
        validated={k: v for k, v in before.validated.items() if k in keep},
        unvalidated={k: v for k, v in before.unvalidated.items() if k in keep},
        crossings={k: v for k, v in before.crossings.items() if k in keep},
        urgent=[k for k in before.urgent if k in keep],
    )
    for key, look in sorted(looks.items()):
        if look.problem is not None or not look.new or look.latest is None:
            continue
        state.seen[key] = look.latest
        state.unvalidated.setdefault(key, now)
        if look.crossing:
            state.crossings.setdefault(key, now)
        else:
            state.crossings.pop(key, None)  # compacted meanwhile, or refused: the audit shows why
        if look.error and key not in state.urgent:
            state.urgent.append(key)

    budget = caps.max_runs_per_tick
    waiting = []
    # Compaction first: it is the work that grows worse with waiting, and it validates too.
    for key in [k for k in state.crossings if k in compacting]:
        del state.crossings[key]  # the run already queued or running compacts the newest batch
    due = sorted(state.crossings, key=lambda k: (state.crossings[k], k))
    room = max(0, min(budget, caps.max_queued_per_job - queued.get("compact", 0)))
    compact = tuple((key, state.seen[key]) for key in due[:room])
    for key, _ in compact:
        del state.crossings[key]
        state.unvalidated.pop(key, None)
        state.validated[key] = now
        if key in state.urgent:
            state.urgent.remove(key)
    budget -= len(compact)
    if len(due) > room:
        waiting.append(f"{len(due) - room} compaction(s) wait for room in the queue ({room} requested; "
                       f"{queued.get('compact', 0)} of {caps.max_queued_per_job} were queued)")  # fmt: skip

    period = caps.validation_period_seconds
    due_v = sorted(
        (k for k in state.unvalidated if k in state.urgent or now - state.validated.get(k, -1e18) >= period),
        key=lambda k: (k not in state.urgent, state.unvalidated[k], k),
    )
    size = max(1, caps.max_per_validation_run)
    runs = [tuple(due_v[i : i + size]) for i in range(0, len(due_v), size)]
    room_v = max(0, min(budget, caps.max_queued_per_job - queued.get("validate", 0)))
    validate = tuple(tuple(sorted(run)) for run in runs[:room_v])
    for run in validate:
        for key in run:
            state.unvalidated.pop(key, None)
            state.validated[key] = now
            if key in state.urgent:
                state.urgent.remove(key)
    if len(runs) > room_v:
        left = sum(len(r) for r in runs[room_v:])
        waiting.append(f"{left} checkpoint(s) wait for validation: the queue or this tick's cap is full "
                       f"({len(validate)} run(s) requested; {queued.get('validate', 0)} of "
                       f"{caps.max_queued_per_job} were queued)")  # fmt: skip
    return TickPlan(compact, validate, state, "; ".join(waiting))
