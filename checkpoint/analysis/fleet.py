"""The fleet view: one row per checkpoint, from the head-first model, ranked by what needs attention.

A row costs what the head-first validation at the latest committed batch costs, of the logs only
what a restart reads (`checks.validate_look`: not the hundred retained batches, unless those tell
what the newest cannot), never a listing of `state/`. What only a full listing knows (the bytes a
cleanup would reclaim) and what only the orchestrator knows (when maintenance last ran) are handed
in by the caller: the CLI plans a dry-run cleanup, Dagster reads its own last plans and runs.
What a dormant checkpoint holds comes from its audit trail (`with_held`), listed only on request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from checkpoint.analysis.checks import (
    FindingCode,
    Severity,
    Validation,
    ValidationOptions,
    dormant_since,
    unfinished_batch,
    validate,
    validate_look,
)
from checkpoint.analysis.readiness import Facts, Readiness, readiness_of
from checkpoint.analysis.report import human_bytes
from checkpoint.errors import CheckpointError
from checkpoint.format import LINEAGE_HEADER_CAP
from checkpoint.model import Checkpoint, load_head
from checkpoint.policy import POLICY, Policy
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage

log = logging.getLogger(__name__)

UNREADABLE = "UNREADABLE"


@dataclass(frozen=True)
class FleetRow:
    key: str
    url: str
    latest_committed_batch: int | None
    last_commit_age_seconds: float | None
    live: bool
    errors: tuple[str, ...]  # finding codes, each once
    warnings: tuple[str, ...]
    max_chain_length: int
    max_chain_store: str | None  # operator/partition/store
    max_lineage_header_fraction: float
    reclaimable_bytes: int | None = None  # None: no cleanup plan known
    reclaimable_planned_at: float | None = None  # when the plan that found them was made
    last_compaction: str | None = None
    last_cleanup: str | None = None
    last_rehearsal: str | None = None  # when, the verdict and the Spark of the newest restart rehearsal
    problem: str | None = None  # why the checkpoint could not be read
    state_format: str | None = None  # `Checkpoint.state_format`; None when unreadable
    readiness: Readiness | None = None  # under the target Spark asked for; None: none asked, or unreadable
    # When the query last planned or committed a batch, once that is the policy's dormancy period
    # ago: dormant (DORMANT), or stopped mid-batch (STOPPED_MID_BATCH) when a batch is unfinished.
    dormant_since: float | None = None
    stopped_mid_batch_since: float | None = None
    # What a dormant (or stopped mid-batch) checkpoint holds: a listing, once per dormancy, that
    # the caller hands in (`with_held`); None when not dormant or not known.
    files_held: int | None = None
    bytes_held: int | None = None
    # What a TTL has expired in its transformWithState stores (`checkpoint.expiry`), when looked at:
    # the entries, their share of those with a TTL, their bytes. None: not looked at, or no such store.
    expired: int | None = None
    expired_share: float | None = None
    expired_bytes: int | None = None

    @property
    def idle_since(self) -> float | None:
        return self.dormant_since if self.dormant_since is not None else self.stopped_mid_batch_since

    @property
    def held_unknown(self) -> bool:
        """Idle, read, and what it holds not known yet: what `--held` lists."""
        return self.idle_since is not None and self.problem is None and self.bytes_held is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "url": self.url,
            "latest_committed_batch": self.latest_committed_batch,
            "last_commit_age_seconds": self.last_commit_age_seconds,
            "live": self.live,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "max_chain_length": self.max_chain_length,
            "max_chain_store": self.max_chain_store,
            "max_lineage_header_fraction": round(self.max_lineage_header_fraction, 4),
            "reclaimable_bytes": self.reclaimable_bytes,
            "reclaimable_planned_at": self.reclaimable_planned_at,
            "last_compaction": self.last_compaction,
            "last_cleanup": self.last_cleanup,
            "last_rehearsal": self.last_rehearsal,
            "problem": self.problem,
            "state_format": self.state_format,
            "readiness": None if self.readiness is None else self.readiness.as_dict(),
            "dormant_since": self.dormant_since,
            "stopped_mid_batch_since": self.stopped_mid_batch_since,
            "files_held": self.files_held,
            "bytes_held": self.bytes_held,
            "expired": self.expired,
            "expired_share": self.expired_share,
            "expired_bytes": self.expired_bytes,
        }


def fleet_row(
    key: str,
    ckpt: Checkpoint,
    policy: Policy = POLICY,
    now: float | None = None,
    target: str | None = None,
    validation: Validation | None = None,
    **known: Any,
) -> FleetRow:
    """The row of a checkpoint loaded head-first (`strict=False`); `known` fills the fields the
    model cannot know (reclaimable_bytes, last_compaction, last_cleanup). With `target` (a line of
    `readiness.LINES`), whether that Spark restarts it, from what the validation read. `validation`:
    the checkpoint's under `row_options`, when the caller has it (`look_at`)."""
    now = time.time() if now is None else now
    validation = validate(ckpt, row_options(policy, now)) if validation is None else validation
    codes = {
        sev: tuple(sorted({f.code for f in validation.findings if f.severity == sev})) for sev in Severity
    }
    longest = max(validation.lineage, key=lambda e: e.chain_length, default=None)
    last_commit = ckpt.last_commit_mtime
    idle = dormant_since(ckpt, now, policy.dormant_seconds)
    mid_batch = unfinished_batch(ckpt) is not None
    return FleetRow(
        key=key,
        url=ckpt.url,
        latest_committed_batch=ckpt.latest_committed_batch,
        last_commit_age_seconds=None if last_commit is None else round(now - last_commit, 1),
        live=ckpt.is_live(now, policy.quiet_seconds),
        errors=codes.get(Severity.ERROR, ()),
        warnings=codes.get(Severity.WARNING, ()),
        max_chain_length=longest.chain_length if longest else 0,
        max_chain_store=longest.store.label if longest is not None and longest.chain_length else None,
        # Not a store that loads its version's own zip: that load starts the lineage again.
        max_lineage_header_fraction=max(
            (e.lineage_header_bytes / LINEAGE_HEADER_CAP for e in validation.lineage if not e.loads_own_base),
            default=0.0,
        ),
        state_format=ckpt.state_format,
        dormant_since=None if mid_batch else idle,
        stopped_mid_batch_since=idle if mid_batch else None,
        readiness=None
        if target is None
        else readiness_of(Facts.of(ckpt, validation.lineage, validation.snapshot_versions), target),
        **known,
    )


def row_options(policy: Policy, now: float) -> ValidationOptions:
    return ValidationOptions(
        long_chain_threshold=policy.long_chain,
        header_cap_ratio=policy.header_cap_ratio,
        now=now,
        dormant_seconds=policy.dormant_seconds,
    )


def look_at(
    key: str,
    url: str,
    storage_options: dict[str, Any] | None,
    policy: Policy,
    known: dict,
    target: str | None = None,
) -> FleetRow:
    """The row of one checkpoint read head-first, or, when it cannot be read, a row that says why.
    Plain arguments, so that a worker process can be given it (`discovery.each_checkpoint`)."""
    now = time.time()
    try:
        storage = Storage(url, storage_options)
        ckpt, validation = validate_look(
            lambda logs: load_head(storage, strict=False, logs=logs), row_options(policy, now)
        )
        return fleet_row(key, ckpt, policy, now, target, validation, **known)
    except CheckpointError as exc:  # one unreadable checkpoint is a row, never the end
        return unreadable_row(key, url, str(exc), **known)


def with_held(
    row: FleetRow,
    checkpoint: Storage,
    audit_url: str | None = None,
    audit_options: dict[str, Any] | None = None,
    *,
    listing: bool = False,
) -> FleetRow:
    """A fleet row with what its checkpoint holds when it is dormant or stopped mid-batch, as its
    audit trail (at `audit_url`, default beside the checkpoint) knows it (`AuditTrail.held`), and
    with `listing` from a listing of it when the trail does not know; as it was when it is not
    dormant, when it has no trail (at the top of a bucket), when nothing is known, or when the
    listing fails (said in the log). A listing of every dormant checkpoint costs what its history
    holds: the fleet view makes it only when asked (`--held`)."""
    since = row.idle_since
    if since is None:
        return row
    try:
        trail = AuditTrail(audit_url or AuditTrail.default_for(checkpoint.url), audit_options)
    except CheckpointError:  # no folder beside it for a trail (a bucket top): not known, not a failure
        return row
    try:
        held = trail.held(checkpoint, since, listing=listing)
    except CheckpointError as exc:
        log.warning("%s: what it holds could not be listed: %s", checkpoint.url, exc)
        return row
    if held is None:
        return row
    return replace(row, files_held=held[0], bytes_held=held[1])


def headroom(fraction: float, policy: Policy = POLICY) -> Severity | None:
    """How close a lineage header is to the cap: an error from the policy's ratio (where validation
    errs and compaction rescues), a warning from policy.fleet_header_warn_ratio, else nothing."""
    if fraction >= policy.header_cap_ratio:
        return Severity.ERROR
    return Severity.WARNING if fraction >= policy.fleet_header_warn_ratio else None


def unreadable_row(key: str, url: str, problem: str, **known: Any) -> FleetRow:
    """A checkpoint that could not be read is a row too, at the top of the ranking."""
    return FleetRow(key, url, None, None, False, (UNREADABLE,), (), 0, None, 0.0, problem=problem, **known)


def urgency(row: FleetRow, policy: Policy = POLICY) -> tuple:
    """Sort key, most urgent first, by the same need `needs_attention` names (unreadable, a header
    at the cap, moved, errors, a header past the warning, a long chain, wasted bytes, warnings,
    healthy); within one need, headroom, then chains, then bytes. A healthy checkpoint's header
    fraction never ranks it above a long chain."""
    return (
        _need(row, policy)[0],
        -row.max_lineage_header_fraction,
        -row.max_chain_length,
        -(row.reclaimable_bytes or 0),
        row.key,
    )


def ranked(rows: list[FleetRow], policy: Policy = POLICY) -> list[FleetRow]:
    return sorted(rows, key=lambda r: urgency(r, policy))


_NEEDS = (
    "cannot be read",
    "header at the cap",
    "moved",
    "errors",
    "header past the warning",
    "long chain",
    "reclaimable bytes",
    "warnings",
    "healthy",
)  # by rank, as `_need` ranks


def shown(rows: list[FleetRow], limit: int, policy: Policy = POLICY) -> tuple[list[FleetRow], dict[str, str]]:
    """The `limit` rows a table shows, most urgent first, chosen per kind of need in turn (the most
    urgent of each kind, then the next of each...), so a thousand error rows cannot hide every
    long chain; healthy rows only fill what the others leave. Also what it shows of each kind
    ("21 of 21"), for the reader to know what the table leaves out."""
    kinds: dict[int, list[FleetRow]] = {}
    for row in ranked(rows, policy):
        kinds.setdefault(_need(row, policy)[0], []).append(row)
    healthy = kinds.pop(_HEALTHY[0], [])
    taken: dict[int, int] = dict.fromkeys(kinds, 0)
    chosen: list[FleetRow] = []
    while len(chosen) < limit and any(taken[k] < len(kinds[k]) for k in kinds):
        for k in sorted(kinds):
            if len(chosen) < limit and taken[k] < len(kinds[k]):
                chosen.append(kinds[k][taken[k]])
                taken[k] += 1
    room = max(0, limit - len(chosen))
    chosen += healthy[:room]
    counts = {_NEEDS[k]: f"{taken[k]} of {len(kinds[k])}" for k in sorted(kinds)}
    counts[_NEEDS[_HEALTHY[0]]] = f"{min(room, len(healthy))} of {len(healthy)}"
    return sorted(chosen, key=lambda r: urgency(r, policy)), counts


@dataclass(frozen=True)
class Attention:
    row: FleetRow
    reason: str
    action: str


def needs_attention(rows: list[FleetRow], policy: Policy = POLICY, limit: int = 10) -> list[Attention]:
    """The checkpoints that need a person or a maintenance run, most urgent first, each with the
    reason and the action that fixes it; healthy ones are left out."""
    out = []
    for row in ranked(rows, policy):
        rank, reason, action = _need(row, policy)
        if reason:
            out.append(Attention(row, reason, action))
    return out[:limit]


_HEALTHY = (8, "", "")


def _need(row: FleetRow, policy: Policy) -> tuple[int, str, str]:
    """(rank, reason, action) of the most pressing need of a checkpoint; the ranking and the
    attention list both read it, so they agree."""
    header = f"{row.max_lineage_header_fraction:.0%} of the lineage header cap"
    if row.problem is not None:
        return 0, f"cannot be read: {row.problem}", "check the path, the credentials and `ckpt inspect`"
    if FindingCode.LINEAGE_HEADER_NEAR_CAP in row.errors:
        return 1, header, "compact now (`ckpt compact`): the query dies when a header passes 65,535 bytes"
    if FindingCode.MOVED_CHECKPOINT in row.errors:
        return (
            2,
            "moved or copied: its operator metadata names schema files under another root",
            f"`ckpt fork {row.url} NEW` and start the query on NEW, or move it back: Spark cannot "
            "restart here",
        )
    if row.errors:
        return (
            3,
            f"error findings: {', '.join(row.errors)}",
            "read `ckpt validate --deep`; maintenance refuses this checkpoint until it is fixed",
        )
    if row.max_lineage_header_fraction >= policy.fleet_header_warn_ratio:
        return 4, header, "compact (`ckpt compact`) before the header nears the cap"
    if row.max_chain_length >= policy.long_chain:
        return (
            5,
            f"recovery replays a chain of {row.max_chain_length} files ({row.max_chain_store})",
            "compact (`ckpt compact`): recovery then loads one snapshot",
        )
    if row.reclaimable_bytes:
        return 6, f"{human_bytes(row.reclaimable_bytes)} reclaimable", "clean up (`ckpt gc --apply`)"
    if row.warnings:
        return 7, f"warnings: {', '.join(row.warnings)}", "read `ckpt validate`"
    return _HEALTHY


@dataclass(frozen=True)
class FleetTotals:
    checkpoints: int
    unhealthy: int  # with any error finding (unreadable included)
    longest_chain: int
    reclaimable_bytes: int
    worst_header_fraction: float
    codes: dict[str, int] = field(default_factory=dict)
    dormant: int = 0
    stopped_mid_batch: int = 0
    dormant_bytes: int = 0  # held by the dormant and the stopped mid-batch, where known
    # Under the target Spark: how many restart there ("yes"), do not ("no"), and cannot be told
    # ("unknown", the unreadable included); empty when no target was asked.
    readiness: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def totals(rows: list[FleetRow], target: str | None = None) -> FleetTotals:
    codes: dict[str, int] = {}
    for row in rows:
        for code in row.errors + row.warnings:
            codes[code] = codes.get(code, 0) + 1
    return FleetTotals(
        checkpoints=len(rows),
        unhealthy=sum(1 for r in rows if r.errors),
        longest_chain=max((r.max_chain_length for r in rows), default=0),
        reclaimable_bytes=sum(r.reclaimable_bytes or 0 for r in rows),
        worst_header_fraction=max((r.max_lineage_header_fraction for r in rows), default=0.0),
        codes=dict(sorted(codes.items())),
        dormant=sum(1 for r in rows if r.dormant_since is not None),
        stopped_mid_batch=sum(1 for r in rows if r.stopped_mid_batch_since is not None),
        dormant_bytes=sum(r.bytes_held or 0 for r in rows if r.idle_since is not None),
        readiness={} if target is None else _readiness_counts(rows, target),
    )


def _readiness_counts(rows: list[FleetRow], target: str) -> dict[str, Any]:
    answers = [None if r.readiness is None else r.readiness.restarts for r in rows]
    refused: dict[str, int] = {}
    for r in rows:
        for action in r.readiness.actions_refused if r.readiness else ():
            refused[action] = refused.get(action, 0) + 1
    return {"target": target, "yes": answers.count(True), "no": answers.count(False),
            "unknown": answers.count(None), "actions_refused": refused}  # fmt: skip
