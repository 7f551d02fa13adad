"""Which stores to compact: long replay chains, and lineage headers near the cap (rescue).

Both formats and both providers: RocksDB zips (format V2 and V1) and the HDFS-backed store's
snapshots. Format V1 only while the query is stopped (`_refuse_live_v1`).

Planning is gated by validation: a checkpoint with an error finding at its latest committed batch
is refused before anything is planned, so no entry point (CLI, Spark job, Dagster asset, sensor)
can build a snapshot on a damaged checkpoint. The one error compaction exists to fix, a lineage
header near the cap, is rescued rather than refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

from checkpoint.analysis import FindingCode, Severity, ValidationOptions, unproven_writer, validate
from checkpoint.errors import CompactionDeferred, CompactionRefused
from checkpoint.format import LINEAGE_HEADER_CAP, StateAction
from checkpoint.model import Checkpoint, StoreLineage, checkpoint_lineage
from checkpoint.policy import POLICY

# Error findings that compaction repairs instead of refusing.
FIXED_BY_COMPACTION = frozenset({FindingCode.LINEAGE_HEADER_NEAR_CAP})


class Why(StrEnum):
    """Why a store is compacted."""

    LONG_CHAIN = "long_chain"  # recovery replays at least the policy's chain
    LINEAGE_HEADER_NEAR_CAP = "lineage_header_near_cap"  # a rescue: the next changelog header may not fit


@dataclass(frozen=True)
class Target:
    entry: StoreLineage
    reason: Why

    def as_key(self) -> tuple[int, int, str, int]:
        s = self.entry.store
        return s.operator, s.partition, s.store, self.entry.batch


@dataclass(frozen=True)
class Skip:
    operator: int
    partition: int
    store: str
    reason: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _next_header_bytes(entry: StoreLineage) -> int:
    """The size of the lineage header Spark writes next if nothing changes: one more entry."""
    one_more = len(f',{{"version":{entry.version},"checkpointUniqueId":"{entry.unique_id}"}}')
    return entry.lineage_header_bytes + one_more


def dead_on_the_cap(ckpt: Checkpoint, latest: list[StoreLineage]) -> bool:
    """An unfinished batch whose stores cannot write their next changelog header: the query died on
    the cap and dies again on every restart. Nothing can be writing it, so its newest committed
    version may be compacted - the only rescue, since Spark resets its lineage only when it loads a
    version from that version's own zip (seen in the rescue test)."""
    return ckpt.unfinished and any(_next_header_bytes(e) > LINEAGE_HEADER_CAP for e in latest if e.header)


@dataclass(frozen=True)
class CompactionPlanOptions:
    min_chain: int = POLICY.long_chain  # a store is compacted from this replay chain length
    quiet_seconds: float = POLICY.quiet_seconds  # a commit or offset newer than this: live
    header_cap_ratio: float = POLICY.header_cap_ratio  # a header this near the cap is rescued
    now: float | None = None  # a manual clock; None: the time


@dataclass(frozen=True)
class CompactionPlan:
    """The stores to compact, and why each other store is not."""

    targets: tuple[Target, ...]
    skips: tuple[Skip, ...]


def _nothing(why: str) -> CompactionPlan:
    return CompactionPlan((), (Skip(-1, -1, "*", why),))


def plan_compaction(
    ckpt: Checkpoint, options: CompactionPlanOptions = CompactionPlanOptions()
) -> CompactionPlan:
    """Targets at the latest committed batch; on a live query, at the one before it.

    Raises CompactionRefused when validation of the checkpoint (loaded with `strict=False` or
    not) finds an error other than those compaction fixes.
    """
    o = options
    now = time.time() if o.now is None else o.now
    committed = sorted(b.id for b in ckpt.batches.values() if b.committed)
    if not committed:
        return _nothing("no committed batch")
    _refuse_on_errors(
        ckpt, ValidationOptions(long_chain_threshold=o.min_chain, header_cap_ratio=o.header_cap_ratio)
    )
    live = ckpt.is_live(now, o.quiet_seconds)
    if live:
        ckpt.states.on_refusal(StateAction.COMPACT_LIVE, lambda why: _refuse_live_v1(ckpt, o.quiet_seconds))
    latest = checkpoint_lineage(ckpt, committed[-1])
    if live and not dead_on_the_cap(ckpt, latest):
        if len(committed) < 2:
            return _nothing("live query with a single committed batch: nothing below the newest")
        entries = checkpoint_lineage(ckpt, committed[-2])
    else:
        entries = latest
    targets: list[Target] = []
    skips: list[Skip] = []
    for entry in entries:
        if entry.chain_length and entry.loadable:
            _refuse_unproven_writer(ckpt, entry)
        s = entry.store

        def skip(reason: str, s=s) -> None:
            skips.append(Skip(s.operator, s.partition, s.store, reason))

        if entry.chain_length == 0:
            skip("loads from its own snapshot already")
        elif not entry.loadable:
            skip("replay chain incomplete: validate the checkpoint")
        elif entry.header_cap_ratio >= o.header_cap_ratio:
            targets.append(Target(entry, Why.LINEAGE_HEADER_NEAR_CAP))
        elif entry.chain_length >= o.min_chain:
            targets.append(Target(entry, Why.LONG_CHAIN))
        else:
            skip(f"chain of {entry.chain_length} is below {o.min_chain}")
    return CompactionPlan(tuple(targets), tuple(skips))


def _refuse_live_v1(ckpt: Checkpoint, quiet_seconds: float) -> None:
    """Format V1 names carry no attempt id: a running query, or one restarted meanwhile, writes
    the very names a snapshot would take, and an unfinished batch's files sit above the newest
    committed version. So V1 is compacted only once the query is stopped and quiet."""
    unfinished = ckpt.unfinished
    why = (
        f"batch {ckpt.latest_planned_batch} is planned and not committed (a running query, or one "
        "that died: let it finish a batch, then stop it)"
        if unfinished
        else f"a commit or offset is newer than the quiet period ({quiet_seconds:.0f} s)"
    )
    raise CompactionDeferred(
        f"refused: format V1 ({ckpt.state_format}) is compacted only while the query is stopped, "
        f"because its file names carry no attempt id; {why}. Nothing was written",
        ckpt.url,
    )


def _refuse_unproven_writer(ckpt: Checkpoint, entry: StoreLineage) -> None:
    why = unproven_writer(ckpt, entry)
    if why is not None:
        where = entry.base or entry.committed_file
        url = ckpt.storage.full(where.rel if where else "")
        raise CompactionRefused(f"refused: {why}. Nothing was written", url)


def _refuse_on_errors(ckpt: Checkpoint, options: ValidationOptions) -> None:
    blocking = [
        f
        for f in validate(ckpt, options).findings
        if f.severity == Severity.ERROR and f.code not in FIXED_BY_COMPACTION
    ]
    if blocking:
        codes = ", ".join(sorted({f.code for f in blocking}))
        first = blocking[0]
        raise CompactionRefused(
            f"refused: {len(blocking)} error finding(s) ({codes}); nothing was written. "
            f"First: {first.path}: {first.message}",
            ckpt.url,
        )
