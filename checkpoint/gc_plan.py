"""Planning an orphan cleanup: read what the retained set depends on, fail closed, write a manifest.

A plan is built only from a checkpoint that was read completely (safety.md, "Fail closed"): a strict
load (every commit and offset file parsed), every lineage header the window needs, every zip's
metadata. The plan records the commit log it was planned against, so `gc_apply` can refuse it when
the log changed underneath.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import CheckpointError
from .layout import FileKind
from .lineage import store_ids
from .model import SCOPE_LISTING, Checkpoint
from .orphans import GcOptions, RetentionInputs, UnsafeToPlan, find_orphans
from .policy import POLICY
from .validate import Category, Severity, validate

PLAN_FORMAT = 1


class GcError(CheckpointError):
    """Cleanup refused: the message says why; nothing was deleted."""


def totals_by(items, key: str) -> dict[str, dict[str, int]]:
    """Files and bytes per value of `key` (reason, store) of planned or processed files."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"files": 0, "bytes": 0})
    for item in items:
        entry = out[getattr(item, key) or "-"]
        entry["files"] += 1
        entry["bytes"] += item.bytes
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class PlannedFile:
    path: str  # relative to the checkpoint
    bytes: int
    mtime: float
    reason: str
    store: str | None


@dataclass(frozen=True)
class Plan:
    plan_id: str
    checkpoint: str
    planned_at: float
    against_batch: int
    latest_planned_batch: int | None
    live: bool
    grace_seconds: float
    retain_batches: int | None
    commit_digests: dict[int, str]
    candidates: tuple[PlannedFile, ...]
    retained_files: int
    kept: dict[str, int] = field(default_factory=dict)

    @property
    def files(self) -> int:
        return len(self.candidates)

    def confirmed_by(self, fresh: Plan) -> tuple[Plan, tuple[PlannedFile, ...]]:
        """(this plan cut to the candidates that a fresh plan also names, the ones it drops).

        A plan made before an action took the checkpoint's lease is re-made under it: whatever
        happened in between (another action's new snapshot, a new commit) can only take files
        out of the plan, never put any in.
        """
        again = {c.path for c in fresh.candidates}
        kept = tuple(c for c in self.candidates if c.path in again)
        dropped = tuple(c for c in self.candidates if c.path not in again)
        return dataclasses.replace(self, candidates=kept), dropped

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.candidates)

    def totals(self, key: str) -> dict[str, dict[str, int]]:
        return totals_by(self.candidates, key)

    def summary(self) -> dict[str, Any]:
        return {
            "candidates": [{"path": c.path, "bytes": c.bytes, "reason": c.reason} for c in self.candidates],
            "files": self.files,
            "bytes": self.bytes,
            "by_reason": self.totals("reason"),
            "by_store": self.totals("store"),
            "against_batch": self.against_batch,
            "live": self.live,
            "retained_files": self.retained_files,
            "kept": self.kept,
        }

    # The manifest: one header line, then one line per candidate (JSON lines, appendable, greppable).

    def to_jsonl(self) -> str:
        head = {k: v for k, v in asdict(self).items() if k != "candidates"}
        head.update(type="plan", format=PLAN_FORMAT, files=self.files, bytes=self.bytes,
                    by_reason=self.totals("reason"), by_store=self.totals("store"))  # fmt: skip
        lines = [json.dumps(head, sort_keys=True)]
        lines += [json.dumps({"type": "candidate", **asdict(c)}, sort_keys=True) for c in self.candidates]
        return "\n".join(lines) + "\n"

    @staticmethod
    def from_jsonl(text: str, path: str = "plan") -> Plan:
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            head = rows[0]
            if head.get("type") != "plan" or head.get("format") != PLAN_FORMAT:
                raise GcError(f"not a plan manifest of format {PLAN_FORMAT}", path)
            fields = {k: head[k] for k in Plan.__dataclass_fields__ if k != "candidates"}
            fields["commit_digests"] = {int(k): v for k, v in fields["commit_digests"].items()}
            candidates = tuple(
                PlannedFile(**{k: r[k] for k in PlannedFile.__dataclass_fields__}) for r in rows[1:]
            )
            return Plan(candidates=candidates, **fields)
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise GcError(f"unreadable plan manifest: {exc}", path) from exc


def commit_digests(ckpt: Checkpoint) -> dict[int, str]:
    """Digests of the very commit files the plan was computed from (no second read, no race)."""
    return {b.id: b.commit.digest for b in ckpt.batches.values() if b.commit is not None}


def _inputs(ckpt: Checkpoint, window: list[int]) -> RetentionInputs:
    committed: dict[int, dict] = {}
    lineages = {}
    for batch in window:
        stores = {}
        for sid in store_ids(ckpt, batch):
            uid = ckpt.committed_unique_id(batch, sid)
            if uid is None:
                raise GcError(
                    f"batch {batch} names no committed id for {sid}", ckpt.storage.full(f"commits/{batch}")
                )
            stores[sid] = uid
            store = ckpt.stores.get(sid)
            if store is None or store.file(FileKind.ZIP, batch + 1, uid) is not None:
                continue
            changelog = store.file(FileKind.CHANGELOG, batch + 1, uid)
            if changelog is not None and changelog.rel not in lineages:
                header = ckpt.read_changelog_header(changelog)  # raises: fail closed
                if header.lineage is None:
                    raise GcError("a V2 changelog without lineage", ckpt.storage.full(changelog.rel))
                lineages[changelog.rel] = header.lineage
        committed[batch] = stores
    zip_ssts: dict[str, tuple[str, ...] | None] = {}
    for f in ckpt.files:
        if f.kind == FileKind.ZIP:
            try:
                zip_ssts[f.rel] = tuple(s.dfs_name for s in ckpt.read_snapshot(f).metadata.sst_files)
            except CheckpointError:
                zip_ssts[f.rel] = None  # fatal only if retained: find_orphans checks
    return RetentionInputs(ckpt.files, window[-1], committed, lineages, zip_ssts)


def _guard_paths(ckpt: Checkpoint, rels: list[str]) -> None:
    """Inside `state/`, no `..`, and (on local disks) no symlink leading out of the checkpoint."""
    for rel in rels:
        parts = rel.split("/")
        if parts[0] != "state" or ".." in parts or "" in parts:
            raise GcError(f"refusing a path outside the checkpoint's state/ folder: {rel}", ckpt.url)
    for rel, real in ckpt.storage.outside(rels, "state").items():
        raise GcError(f"{rel} resolves to {real}, outside the state/ folder (a symlink?): nothing planned",
                      ckpt.url)  # fmt: skip


def plan_gc(
    ckpt: Checkpoint,
    grace_seconds: float = POLICY.grace_seconds,
    retain_batches: int | None = None,
    quiet_seconds: float = POLICY.quiet_seconds,
    now: float | None = None,
    allow_short_grace: bool = False,
) -> Plan:
    """The orphans of a checkpoint loaded with `strict=True`; raises GcError when planning is unsafe."""
    now = time.time() if now is None else now
    if grace_seconds < POLICY.min_grace_seconds and not allow_short_grace:
        raise GcError(
            f"a grace period of {grace_seconds:.0f} s is below {POLICY.min_grace_seconds / 60:g} minutes: "
            "files of a batch still being written could be deleted. Override only if nothing writes to "
            "this checkpoint",
            ckpt.url,
        )
    if retain_batches is not None and retain_batches < 1:
        raise GcError("--retain-batches must be at least 1", ckpt.url)
    if ckpt.scope != SCOPE_LISTING:
        # Fail closed: a head-first model lacks every file it was not asked for, which would read
        # as "nothing retained there".
        raise GcError("a cleanup plan needs a checkpoint loaded from a full listing", ckpt.url)
    if ckpt.format_version != 2:
        raise GcError("format V1 checkpoint: Spark cleans these itself; gc handles format V2 only", ckpt.url)
    if ckpt.problems:
        raise GcError(f"unreadable files: {', '.join(p.rel for p in ckpt.problems)}", ckpt.url)
    errors = [f for f in validate(ckpt, categories=frozenset({Category.COMMIT_LOG})).findings
              if f.severity == Severity.ERROR]  # fmt: skip
    if errors:
        raise GcError(
            "the commit log is inconsistent: " + "; ".join(f"{f.code} {f.message}" for f in errors), ckpt.url
        )
    committed = sorted(b.id for b in ckpt.batches.values() if b.committed)
    if not committed:
        raise GcError("no committed batch: nothing can be told apart from a batch in flight", ckpt.url)
    window = committed[-retain_batches:] if retain_batches else committed
    live = ckpt.is_live(now, quiet_seconds)
    try:
        scan = find_orphans(_inputs(ckpt, window), GcOptions(grace_seconds=grace_seconds, live=live), now)
    except UnsafeToPlan as exc:
        raise GcError(f"unsafe to plan: {exc}", ckpt.url) from exc
    _guard_paths(ckpt, [c.rel for c in scan.candidates])
    kept: dict[str, int] = defaultdict(int)
    for why in scan.kept.values():
        kept[why.value] += 1
    return Plan(
        plan_id=f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{uuid.uuid4().hex[:8]}",
        checkpoint=ckpt.url,
        planned_at=now,
        against_batch=committed[-1],
        latest_planned_batch=ckpt.latest_planned_batch,
        live=live,
        grace_seconds=grace_seconds,
        retain_batches=retain_batches,
        commit_digests=commit_digests(ckpt),
        candidates=tuple(
            PlannedFile(
                c.rel, c.file.info.size, c.file.info.mtime or 0.0, c.reason.value, _store_label(c.file)
            )
            for c in sorted(scan.candidates, key=lambda c: _delete_order(c.file.kind, c.rel))
        ),
        retained_files=len(scan.retained),
        kept=dict(sorted(kept.items())),
    )


# Zips before the SSTs they list (never a zip pointing at missing data), sidecars last.
_ORDER = {
    FileKind.ZIP: 0,
    FileKind.CHANGELOG: 1,
    FileKind.SST: 2,
    FileKind.SPARK_CRC: 3,
    FileKind.HADOOP_CRC: 4,
}


def _delete_order(kind: FileKind, rel: str) -> tuple[int, str]:
    return _ORDER.get(kind, 5), rel


def _store_label(f) -> str | None:
    w = f.what
    return None if w.operator is None else f"{w.operator}/{w.partition}/{w.store}"
