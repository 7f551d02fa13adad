"""What the commit sensor asks for in one tick: only work that is due, batched and capped.

Pure: the sensor gathers what it looked at (one shallow listing of `commits/` per checkpoint, and
for a new commit the head-first plan the compaction asset itself makes) and what Dagster's queue
holds; this decides. Tests drive it with a manual clock.

- Compaction is due when a new commit's plan has targets (a chain over the threshold, a header near
  the cap). Crossings are kept in the cursor until served, oldest first; none is dropped while the
  queue is full. A checkpoint whose compaction run is already queued or running gets no second one.
  Due checkpoints go into runs of `max_per_compaction_run` (one Spark application each; each run
  takes each of its checkpoints' leases): each full run at once, and what is left over gathered
  for up to `compaction_gather_seconds` from its own oldest crossing unless it fills a run sooner.
- A checkpoint's first sight is not a commit to validate when it is already audited (discovery's
  run validated it): onboarding validates each checkpoint once.
- Validation is due for a checkpoint with a commit not yet validated, at most once per period, or at
  once when the new batch's own check found an error. Every checkpoint due in a tick goes into one
  run (split only past `max_per_validation_run`). A compaction run validates first, so it counts.
- Per job, no more runs are requested than the queue has room for, and no more than
  `max_runs_per_tick` in all.
- A tick looks at checkpoints until its time budget is spent, in turn: it starts where the last
  tick stopped (`looking_order`), so every checkpoint is looked at within ceil(fleet / what a tick
  looks at) ticks, whatever the fleet's size. A checkpoint not looked at keeps its state.
- A dormant checkpoint (its newest commit older than the dormancy period) is looked at once per
  `dormant_look_seconds`, not every tick: the cursor keeps when it was last looked at. That look
  is one stat of the commit after the newest seen, and once per `dormant_list_seconds` the listing
  of its commits (`lists_dormant`: a query started afresh in its folder is seen then). A look that
  finds a new commit wakes it: from then on it is looked at every round again.
- The cursor is packed (zlib, base64): at 10,000 checkpoints it stays under 64 KB (the sensor's
  benchmark says how far under). A cursor of an earlier release is read, then replaced.
- The cursor is input: anyone with the UI can set it. `SensorState.read` bounds its size before
  and after decompression and its number of checkpoints, checks every type and run length, and
  clamps every time to now, so no cursor can postpone a validation or a compaction past one
  period; a cursor it cannot read is an empty state and a warning, and the tick goes on.
"""

from __future__ import annotations

import base64
import bisect
import json
import math
import os
import zlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

_PACKED = "z1:"  # a packed cursor's prefix: earlier releases wrote plain JSON
# A cursor of 10,000 checkpoints packs into tens of KB and unpacks into about a MB: far above both,
# and twenty times the fleet a sensor holds.
MAX_CURSOR_CHARS = 4 << 20
MAX_CURSOR_BYTES = 8 << 20
MAX_CURSOR_KEYS = 200_000


class CursorError(ValueError):
    """A cursor this release cannot read as its own: the tick starts from an empty state."""


@dataclass(frozen=True)
class Look:
    """One checkpoint as this tick saw it."""

    latest: int | None  # newest committed batch
    new: bool = False  # a commit since the last tick
    crossing: bool = False  # the new batch's compaction plan has targets
    error: bool = False  # the new batch's own check found an error finding
    dormant: bool = False  # its newest commit is older than the dormancy period
    problem: str | None = None  # could not be read this tick: its state is kept as it was


@dataclass(frozen=True)
class Caps:
    max_runs_per_tick: int
    max_queued_per_job: int
    validation_period_seconds: float
    max_per_validation_run: int
    # Due compactions are gathered into runs of so many checkpoints (one Spark application each),
    # waiting up to `compaction_gather_seconds` from the oldest for a run's worth.
    max_per_compaction_run: int = 1
    compaction_gather_seconds: float = 0.0
    # A dormant checkpoint is looked at once per so long (0: every round, as any other), and of
    # those looks one per `dormant_list_seconds` lists its commits (`lists_dormant`).
    dormant_look_seconds: float = 0.0
    dormant_list_seconds: float = 0.0


@dataclass
class SensorState:
    """The cursor: what was seen, and the work found but not yet requested."""

    seen: dict[str, int] = field(default_factory=dict)  # newest committed batch looked at
    validated: dict[str, float] = field(default_factory=dict)  # when its last validation was requested
    unvalidated: dict[str, float] = field(default_factory=dict)  # a commit not validated yet, since
    crossings: dict[str, float] = field(default_factory=dict)  # compaction due, since
    urgent: list[str] = field(default_factory=list)  # an error found: validate at once
    next_key: str = ""  # where the next tick starts looking: the round goes on from there
    dormant: dict[str, float] = field(default_factory=dict)  # found dormant, when last looked at

    def to_json(self) -> str:
        """Packed: one sorted, front-coded list of the checkpoints, and per checkpoint its batch
        and times (to the second: the periods are minutes) as columns, equal runs folded, then
        zlib and base64. Checkpoints onboarded together share prefixes, and are validated together."""
        keys = sorted(set(self.seen) | set(self.validated) | set(self.unvalidated) | set(self.dormant))
        body = {
            "keys": _front_coded(keys),
            "seen": _runs([self.seen.get(k) for k in keys]),
            "validated": _runs([_second(self.validated.get(k)) for k in keys]),
            "unvalidated": _runs([_second(self.unvalidated.get(k)) for k in keys]),
            "dormant": _runs([_second(self.dormant.get(k)) for k in keys]),
            "crossings": {k: int(t) for k, t in self.crossings.items()},
            "urgent": self.urgent,
            "next_key": self.next_key,
        }
        packed = zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 9)
        return _PACKED + base64.b64encode(packed).decode()

    @classmethod
    def read(cls, text: str | None, now: float) -> tuple[SensorState, str | None]:
        """The state a cursor holds, and None; or an empty state and why the cursor was not read.
        Every time in it is clamped to `now`: a time in the future would postpone what is due."""
        try:
            state = cls.from_json(text)
        except CursorError as exc:
            return cls(), f"the sensor's cursor was not read ({exc}): starting from an empty state"
        for times in (state.validated, state.unvalidated, state.crossings, state.dormant):
            for key, t in times.items():
                times[key] = min(t, now)
        return state, None

    @classmethod
    def from_json(cls, text: str | None) -> SensorState:
        """The cursor as written; CursorError for anything else, before memory is spent on it."""
        if not text:
            return cls()
        if not isinstance(text, str) or len(text) > MAX_CURSOR_CHARS:
            raise CursorError(f"longer than {MAX_CURSOR_CHARS} characters")
        try:
            if text.startswith(_PACKED):
                return cls._unpacked(_inflate(text[len(_PACKED) :]))
            raw = json.loads(text)
            if not isinstance(raw, dict):
                raise CursorError("not an object")
            if raw and all(isinstance(v, int) for v in raw.values()):
                # the cursor of releases before the last: seen batches only
                return cls(seen=_checked(raw, int))
            return cls(_checked(raw.get("seen", {}), int), _checked(raw.get("validated", {}), float),
                       _checked(raw.get("unvalidated", {}), float), _checked(raw.get("crossings", {}), float),
                       _strings(raw.get("urgent", [])), _string(raw.get("next_key", "")))  # fmt: skip
        except CursorError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, zlib.error) as exc:
            raise CursorError(f"{type(exc).__name__}: {str(exc)[:200]}") from exc

    @classmethod
    def _unpacked(cls, body: Any) -> SensorState:
        if not isinstance(body, dict):
            raise CursorError("not an object")
        keys = _front_decoded(body["keys"])

        def column(name: str, kind: type) -> dict[str, Any]:
            values = _unrun(body[name], len(keys))
            return _checked({k: v for k, v in zip(keys, values, strict=True) if v is not None}, kind)

        # A cursor of the release before knows no dormant checkpoints: each is found at its next look.
        dormant = column("dormant", float) if "dormant" in body else {}
        return cls(column("seen", int), column("validated", float), column("unvalidated", float),
                   _checked(body["crossings"], float), _strings(body["urgent"]),
                   _string(body["next_key"]), dormant)  # fmt: skip


def _second(t: float | None) -> int | None:
    return None if t is None else int(t)


def _front_coded(keys: list[str]) -> list[Any]:
    """Sorted keys as (length shared with the previous key, the rest), flattened."""
    out: list[Any] = []
    prev = ""
    for key in keys:
        shared = len(os.path.commonprefix([prev, key]))
        out += [shared, key[shared:]]
        prev = key
    return out


def _inflate(text: str) -> Any:
    """The packed body, decompressed to at most MAX_CURSOR_BYTES: a small cursor that would unpack
    into gigabytes stops there."""
    inflater = zlib.decompressobj()
    data = inflater.decompress(base64.b64decode(text, validate=True), MAX_CURSOR_BYTES)
    if inflater.unconsumed_tail:
        raise CursorError(f"unpacks into more than {MAX_CURSOR_BYTES} bytes")
    return json.loads(data)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise CursorError(f"{type(value).__name__} where a key is expected")
    return value


def _strings(values: Any) -> list[str]:
    if not isinstance(values, list):
        raise CursorError("a list is expected")
    return [_string(v) for v in values]


def _checked(mapping: Any, kind: type) -> dict[str, Any]:
    """{key: number}, every key a string and every number finite and of `kind` (an int is a float)."""
    if not isinstance(mapping, dict):
        raise CursorError("an object is expected")
    out = {}
    for key, value in mapping.items():
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            raise CursorError(f"{type(value).__name__} where a number is expected")
        if kind is float and not math.isfinite(value):
            raise CursorError("a time that is not finite")
        out[_string(key)] = kind(value)
    return out


def _front_decoded(coded: Any) -> list[str]:
    if not isinstance(coded, list) or len(coded) % 2:
        raise CursorError("its keys are not pairs")
    if len(coded) // 2 > MAX_CURSOR_KEYS:
        raise CursorError(f"more than {MAX_CURSOR_KEYS} checkpoints")
    keys, prev = [], ""
    for shared, rest in zip(coded[::2], coded[1::2], strict=True):
        if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared <= len(prev):
            raise CursorError("a key shares more than the key before it has")
        prev = prev[:shared] + _string(rest)
        keys.append(prev)
    return keys


def _runs(values: list[Any]) -> list[Any]:
    """Equal neighbours folded: [value, count, value, count, ...]."""
    out: list[Any] = []
    for value in values:
        if out and out[-2] == value:
            out[-1] += 1
        else:
            out += [value, 1]
    return out


def _unrun(runs: Any, expected: int) -> list[Any]:
    """Runs unfolded, once their counts are known to add up to `expected` (the keys): a count of
    10^10 is refused before any list is built."""
    if not isinstance(runs, list) or len(runs) % 2:
        raise CursorError("a column is not pairs of a value and a count")
    counts = runs[1::2]
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts) or sum(counts) != expected:
        raise CursorError(f"a column's runs do not add up to its {expected} keys")
    return [value for value, count in zip(runs[::2], counts, strict=True) for _ in range(count)]


def lists_dormant(key: str, state: SensorState, now: float, list_seconds: float) -> bool:
    """Whether this look at `key` lists its commits, as every look at a checkpoint that is not
    dormant does: a dormant one's look is else one stat of the commit after the newest seen. Its
    listing comes with the look that crosses its own boundary of a period of `list_seconds`
    (spread over the period by its name, so the fleet's do not come in one tick): once a period,
    whatever the looks' interval, with nothing more in the cursor."""
    last = state.dormant.get(key)
    if last is None or list_seconds <= 0:
        return True
    spread = zlib.crc32(key.encode()) % int(list_seconds)
    return (now + spread) // list_seconds != (last + spread) // list_seconds


def looking_order(
    keys: Collection[str], state: SensorState, now: float = 0.0, dormant_look_seconds: float = 0.0
) -> list[str]:
    """Every checkpoint this tick looks at, in order: sorted, from where the last tick stopped,
    round the end and back. A checkpoint added since is looked at when the round reaches its place,
    as any other is. A dormant one is left out until `dormant_look_seconds` after its last look."""
    ordered = sorted(k for k in keys if now - state.dormant.get(k, -math.inf) >= dormant_look_seconds)
    start = bisect.bisect_left(ordered, state.next_key)
    return ordered[start:] + ordered[:start]


def resume_at(order: Sequence[str], looked: int) -> str:
    """The key the next tick starts at, once this one looked at the first `looked` of `order`."""
    return order[looked] if looked < len(order) else (order[0] if order else "")


@dataclass(frozen=True)
class TickPlan:
    compact: tuple[tuple[tuple[str, int], ...], ...]  # per run, its (partition key, batch), oldest first
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
    keys: Collection[str] | None = None,
    next_key: str = "",
    audited: Collection[str] = (),
) -> TickPlan:
    """`keys` names every partition (those missing drop out of the state; default: the ones in
    `looks`), `looks` the ones this tick looked at (the others keep their state); `queued` counts
    runs waiting in Dagster's queue per kind ("compact", "validate"); `compacting` names the
    partitions whose compaction run is queued or running; `next_key`, where the next tick starts;
    `audited`, the partitions already audited (by discovery's runs, done or under way): the first
    sight of one is not a commit to validate again."""
    keep = set(looks if keys is None else keys)
    state = SensorState(
        seen={k: v for k, v in before.seen.items() if k in keep},
        validated={k: v for k, v in before.validated.items() if k in keep},
        unvalidated={k: v for k, v in before.unvalidated.items() if k in keep},
        crossings={k: v for k, v in before.crossings.items() if k in keep},
        urgent=[k for k in before.urgent if k in keep],
        next_key=next_key,
        dormant={k: v for k, v in before.dormant.items() if k in keep},
    )
    for key, look in sorted(looks.items()):
        if look.problem is None and look.dormant and not look.new:
            state.dormant[key] = now  # looked at now; next, a dormant look interval from now
        elif look.problem is None:
            state.dormant.pop(key, None)  # a new commit wakes it
        if look.problem is not None or not look.new or look.latest is None:
            continue
        first_sight = key not in state.seen
        state.seen[key] = look.latest
        if first_sight and key in audited and not look.error:
            state.validated.setdefault(key, now)
        else:
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
    per_run = max(1, caps.max_per_compaction_run)
    # Whole runs go at once; what is left over (the newest) gathers on from its own oldest, so a
    # burst of 16 is a run of 10 now and one of 6 (or more) once its window has passed.
    rest = due[len(due) // per_run * per_run :]
    if rest and now - state.crossings[rest[0]] < caps.compaction_gather_seconds:
        left = caps.compaction_gather_seconds - (now - state.crossings[rest[0]])
        waiting.append(
            f"{len(rest)} compaction(s) gathering for a run of up to {per_run} ({left:.0f} s left)"
        )
        due = due[: len(due) - len(rest)]
    room = max(0, min(budget, caps.max_queued_per_job - queued.get("compact", 0)))
    runs_c = [due[i : i + per_run] for i in range(0, len(due), per_run)]
    compact = tuple(tuple((key, state.seen[key]) for key in run) for run in runs_c[:room])
    for key, _ in (pair for run in compact for pair in run):
        del state.crossings[key]
        state.unvalidated.pop(key, None)
        state.validated[key] = now
        if key in state.urgent:
            state.urgent.remove(key)
    budget -= len(compact)
    if len(runs_c) > room:
        left_c = sum(len(run) for run in runs_c[room:])
        waiting.append(f"{left_c} compaction(s) wait for room in the queue ({len(compact)} run(s) requested; "
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
