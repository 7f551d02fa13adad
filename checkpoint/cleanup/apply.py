"""Check and apply a cleanup plan, recording every outcome in the audit trail.

Check: the commit log the plan was made against must still be there, unchanged (it may only have
grown: new batches write new versions, which a plan never names); whether the query moved on since
(a new commit or offset) is reported, for a caller that re-plans then. Apply: re-check, then read
the manifest a delete batch at a time; right before each batch is sent, re-stat its candidates
(same size, same mtime: one HEAD each, or one listing of a partition when that is fewer
requests), so no candidate is older than one batch's time; delete in bulk (at most 1000 keys per
request), retry throttling with back-off, and append each outcome to the audit log as it happens,
so a crash leaves a record of what was done and a rerun finishes the rest.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from checkpoint.cleanup.plan import Recheck
from checkpoint.cleanup.totals import Totals
from checkpoint.crash import crash_point
from checkpoint.errors import CheckpointError, CleanupStopped, GcError
from checkpoint.format import FileKind, classify, commit_digest
from checkpoint.policy import POLICY
from checkpoint.safety import AuditTrail, Plan, PlannedFile
from checkpoint.storage import DELETE_MAX_KEYS, FileInfo, Storage


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    message: str
    newest_commit: int | None
    moved: bool = False  # a commit or offset newer than the plan's: the query ran since


def check_plan(plan: Plan, storage: Storage) -> CheckResult:
    """Re-reads the commit log: refuse when a commit the plan relied on vanished or changed."""
    listing = storage.list_dir("commits")  # the log as it is now, not as last listed
    if not listing.exists:
        return CheckResult(False, "the commit log is gone", None)
    rels = [f.rel for f in listing.files if classify(f.rel).kind == FileKind.COMMIT]
    logs = storage.read_many(rels, limit=POLICY.max_log_file_bytes)
    current = {int(r.split("/")[1]): commit_digest(d) for r, d in logs.items()}
    newest = max(current, default=None)
    if newest is None or newest < plan.against_batch:
        return CheckResult(
            False, f"the newest commit is {newest}, older than the plan's {plan.against_batch}", newest
        )
    changed = sorted(b for b, digest in plan.commit_digests.items() if b in current and current[b] != digest)
    if changed:
        return CheckResult(False, f"commits {changed} changed since the plan: re-plan", newest)
    if plan.against_batch not in current:
        return CheckResult(False, f"commits/{plan.against_batch} vanished since the plan: re-plan", newest)
    offsets = [int(f.rel.split("/")[1]) for f in storage.list_dir("offsets").files
               if classify(f.rel).kind == FileKind.OFFSET]  # fmt: skip
    planned = max(offsets, default=None)
    # Planned past the plan's newest offset (its first, batch 0, when the plan saw none).
    was = plan.latest_planned_batch
    moved = newest != plan.against_batch or (planned is not None and (was is None or planned > was))
    note = (
        f"; the query moved on (commit {newest}, offset {planned}), which adds no candidate" if moved else ""
    )
    return CheckResult(
        True, f"commit log consistent with the plan (batch {plan.against_batch}){note}", newest, moved
    )


class Kind(StrEnum):
    """What became of a candidate (each is an ApplyResult's tally of that name)."""

    DELETED = "deleted"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class Outcome:
    path: str
    size: int
    reason: str
    outcome: Kind
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.size, "reason": self.reason, "outcome": self.outcome,
                "why": self.why}  # fmt: skip


# What an ApplyResult keeps whole of each kind of outcome: the first ones, and the first distinct
# reasons why. Every outcome is in the audit trail, appended as it happens; the result keeps
# running totals, so an apply of millions of files holds what one of a hundred holds.
SAMPLE = 100
WHYS = 50


@dataclass
class Tally:
    """The outcomes of one kind: how many, their bytes, per reason (a plan's), per why, and the
    first SAMPLE of them."""

    files: int = 0
    total_bytes: int = 0
    by_reason: Totals = field(default_factory=Totals)
    whys: Counter[str] = field(default_factory=Counter)
    sample: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.files += 1
        self.total_bytes += o.size
        self.by_reason.add(o.reason, o.size)
        if o.why in self.whys or len(self.whys) < WHYS:
            self.whys[o.why] += 1
        else:
            self.whys["(other reasons)"] += 1
        if len(self.sample) < SAMPLE:
            self.sample.append(o)


@dataclass
class ApplyResult:
    plan_id: str
    check: CheckResult
    deleted: Tally = field(default_factory=Tally)
    skipped: Tally = field(default_factory=Tally)
    failed: Tally = field(default_factory=Tally)

    def reclaimed_by_reason(self) -> dict[str, dict[str, int]]:
        return self.deleted.by_reason.as_dict()

    def summary(self) -> dict[str, Any]:
        """Totals, and the first failures: every outcome is in the outcomes file."""
        return {
            "deleted": self.deleted.files,
            "deleted_bytes": self.deleted.total_bytes,
            "skipped": self.skipped.files,
            "skipped_why": dict(self.skipped.whys),
            "failed": self.failed.files,
            "failed_why": dict(self.failed.whys),
            "failures": [o.as_dict() for o in self.failed.sample],
        }


# The per-file codes worth another try, S3's (DeleteObjects) and Blob Storage's (Blob Batch);
# anything else (AccessDenied, LeaseIdMissing...) is final.
_RETRYABLE_CODES = (
    "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout",
    "ServerBusy", "OperationTimedOut",
)  # fmt: skip


def apply_plan(
    plan: Plan,
    storage: Storage,
    audit: AuditTrail,
    *,
    check: Callable[[], None],
    batch_size: int = POLICY.delete_batch_size,
    attempts: int = POLICY.delete_attempts,
    sleep: Callable[[float], None] = time.sleep,
    checked: CheckResult | None = None,
) -> ApplyResult:
    """Deletes the plan's candidates that are unchanged since planning. Idempotent.

    Retries: a request is retried by the storage's client alone (botocore's adaptive mode on S3).
    What this adds is the re-drive of keys that a DeleteObjects answered with a retryable per-key
    error: `attempts` rounds, `sleep` between them. `check` (the lease's) runs before each batch
    of deletions: an apply whose lease was taken over stops there. `checked`: the caller's
    own `check_plan` of this plan, made under the same lease just before (not read again).
    """
    verdict = checked if checked is not None else check_plan(plan, storage)
    result = ApplyResult(plan.plan_id, verdict)
    if not verdict.ok:
        raise GcError(f"plan {plan.plan_id} refused: {verdict.message}", plan.checkpoint)
    deleted_count = 0
    chunk = max(1, min(batch_size, DELETE_MAX_KEYS))
    with tempfile.TemporaryDirectory(prefix="ckpt-apply-") as tmp:
        # Trust nothing of the manifest but what its digest proves, and nothing of its lines but
        # what the checkpoint says now: every line passes before the first deletion.
        manifest = audit.verified_copy(plan, tmp)
        recheck = Recheck(plan, storage)
        for batch in audit.candidates(plan, chunk, local=manifest):
            for line in batch:
                recheck.check(line)
        for batch in audit.candidates(plan, chunk, local=manifest):
            check()
            # A listing or a stat that fails raises here, before anything of this batch is deleted.
            outcomes, ready = _restat(_current(storage, batch, plan.partition_files), batch)
            if ready:
                outcomes += _delete(storage, ready, attempts, sleep, plan.folder_ids)
            deleted_count += sum(o.outcome == Kind.DELETED for o in outcomes)
            if deleted_count:
                crash_point("cleanup.deleted", deleted_count)  # the worst moment: deleted, not recorded
            try:
                audit.record(plan, outcomes)
            except CheckpointError as exc:  # a full disk under the audit trail: stop, say what happened
                raise CleanupStopped(
                    f"{deleted_count} file(s) deleted, the outcomes of the last {len(outcomes)} not recorded "
                    f"in the audit trail ({exc}); nothing a batch reads was touched: run the same cleanup "
                    "again once the audit trail has room",
                    plan.checkpoint,
                ) from exc
            for o in outcomes:
                getattr(result, o.outcome).add(o)
    audit.seal(plan)
    return result


def _folder(rel: str) -> str:
    return "/".join(rel.split("/")[:3])  # state/<op>/<part>


def _current(
    storage: Storage, batch: list[PlannedFile], partition_files: dict[str, int]
) -> dict[str, FileInfo]:
    """What each candidate of the batch is now: per partition, one listing when it costs fewer
    requests than a stat (a HEAD on S3) per candidate, else the stats, side by side."""
    by_folder: dict[str, list[str]] = {}
    for c in batch:
        by_folder.setdefault(_folder(c.path), []).append(c.path)
    now: dict[str, FileInfo] = {}
    stats: list[str] = []
    for folder, rels in by_folder.items():
        pages = -(-partition_files.get(folder, 0) // DELETE_MAX_KEYS)  # a listing page holds 1000 keys
        if 0 < pages <= len(rels):
            wanted = set(rels)
            now.update((f.rel, f) for f in storage.list_files(folder) if f.rel in wanted)
        else:
            stats += rels
    with ThreadPoolExecutor(max(1, min(POLICY.store_workers, len(stats) or 1))) as pool:
        for rel, info in zip(stats, pool.map(storage.stat, stats), strict=True):
            if info is not None:
                now[rel] = info
    return now


def _restat(
    current: dict[str, FileInfo], batch: list[PlannedFile]
) -> tuple[list[Outcome], list[PlannedFile]]:
    outcomes, ready = [], []
    for c in batch:
        info = current.get(c.path)
        if info is None:
            outcomes.append(Outcome(c.path, c.size, c.reason, Kind.SKIPPED, "already gone"))
        elif info.size != c.size or info.mtime is None or abs(info.mtime - c.mtime) > 1e-3:
            outcomes.append(Outcome(c.path, c.size, c.reason, Kind.SKIPPED, "changed since the plan"))
        else:
            ready.append(c)
    return outcomes, ready


def _delete(
    storage: Storage, ready: list[PlannedFile], attempts: int, sleep, folders: dict[str, list[int]]
) -> list[Outcome]:
    errors = delete_with_redrive(storage, [c.path for c in ready], attempts, sleep, folders)
    return [
        Outcome(c.path, c.size, c.reason, Kind.FAILED, errors[c.path])
        if c.path in errors
        else Outcome(c.path, c.size, c.reason, Kind.DELETED)
        for c in ready
    ]


def delete_with_redrive(
    storage: Storage, rels: list[str], attempts: int, sleep, folders: dict[str, list[int]]
) -> dict[str, str]:
    """Storage.delete_batch, with the keys that failed with a retryable code sent again after a
    back-off; what keeps failing, or fails for good, is returned per key as {rel: why}."""
    pending, errors = list(rels), {}
    for attempt in range(attempts):
        try:
            this_round = storage.delete_batch(pending, folders)
        except Exception as exc:  # noqa: BLE001 - the request as a whole failed: every key it held did
            errors.update({rel: f"request failed: {type(exc).__name__}: {exc}" for rel in pending})
            break
        pending = [rel for rel, why in this_round.items() if why.startswith(_RETRYABLE_CODES)]
        errors.update({rel: why for rel, why in this_round.items() if rel not in pending})
        if not pending:
            break
        if attempt == attempts - 1:
            errors.update({rel: this_round[rel] for rel in pending})
            break
        sleep(min(30.0, 0.2 * 2**attempt))
    return errors
