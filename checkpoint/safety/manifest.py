"""A cleanup plan as the audit trail keeps it: the header (what it was made against, its totals)
and one line per candidate, streamed, never held whole. Cleanup's planner writes it and its apply
reads it back; the trail keeps it and checks its digest. None of them is needed to read it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from checkpoint.errors import GcError
from checkpoint.policy import POLICY

PLAN_FORMAT = 2  # 1: every candidate held in the Plan; 2: the header names the totals, lines stream


def new_plan_id(now: float) -> str:
    """A plan's id: when it was made, to the millisecond, then a random tail. Ids sort by time,
    which is how the newest plan is found (two plans in one second sorted by their tails did not)."""
    millis = int(now * 1000) % 1000
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}{millis:03d}Z-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class PlannedFile:
    path: str  # relative to the checkpoint
    size: int  # "bytes" in the manifest
    mtime: float
    reason: str
    store: str | None

    def line(self) -> str:
        """Its manifest line, newline included."""
        return candidate_line(self.size, self.mtime, self.path, candidate_tail(self.reason, self.store))

    def as_dict(self) -> dict[str, Any]:
        """Its manifest keys (`line` writes the same, by hand)."""
        return {
            "path": self.path,
            "bytes": self.size,
            "mtime": self.mtime,
            "reason": self.reason,
            "store": self.store,
        }

    @staticmethod
    def parse(row: dict[str, Any]) -> PlannedFile:
        return PlannedFile(row["path"], row["bytes"], row["mtime"], row["reason"], row["store"])


def _quoted(text: str | None) -> str:
    return "null" if text is None else _quote(text)


# By hand, not json.dumps of a dict (nor a PlannedFile first): a line is written per candidate,
# millions of them. The same text json.dumps gives (keys sorted, ASCII escapes), with its newline,
# in two parts: what each file has, and the tail its reason and store give, the same for many.
def candidate_line(size: int, mtime: float, path: str, tail: str) -> str:
    return f'{{"bytes": {size}, "mtime": {mtime!r}, "path": {_quote(path)}{tail}'


def candidate_tail(reason: str, store: str | None) -> str:
    return f', "reason": {_quote(reason)}, "store": {_quoted(store)}, "type": "candidate"}}\n'


@dataclass(frozen=True)
class Plan:
    """A plan's header: what it was made against and its totals. The candidates themselves are
    in the manifest (`manifest`), read back in chunks (`AuditTrail.candidates`)."""

    plan_id: str
    checkpoint: str
    planned_at: float
    against_batch: int
    latest_planned_batch: int | None
    live: bool
    grace_seconds: float
    retain_batches: int | None
    commit_digests: dict[int, str]
    files: int
    total_bytes: int  # "bytes" in the header
    by_reason: dict[str, dict[str, int]]
    by_store: dict[str, dict[str, int]]
    retained_files: int
    kept: dict[str, int] = field(default_factory=dict)
    # files per partition folder when planned: the apply re-stats a batch's candidates with one
    # listing of their partition when that costs fewer requests than a stat each
    partition_files: dict[str, int] = field(default_factory=dict)
    # On a live query: the oldest SST a retained zip listed, over every partition, when planned.
    # A held SST went into the manifest only if older; the apply holds it to the same floor.
    sst_floor: float | None = None
    quiet_seconds: float = POLICY.quiet_seconds  # what "live" was decided by; the apply decides by it again
    # On a local disk, [device, inode] of the checkpoint's folder ("") and of every folder down to
    # each partition folder, when planned: the apply deletes through these very folders, never
    # through one swapped in since (a link, or another folder moved into place)
    folder_ids: dict[str, list[int]] = field(default_factory=dict)
    manifest: str = ""  # its URL in the audit trail
    # sha256 of the manifest's bytes, header included. Never read from the manifest itself: the
    # planner sets it, and whoever applies must get it from a record the manifest cannot edit
    # (the same process, or the plan asset's metadata in Dagster's event log).
    digest: str = ""

    def summary(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "bytes": self.total_bytes,
            "by_reason": self.by_reason,
            "by_store": self.by_store,
            "against_batch": self.against_batch,
            "live": self.live,
            "retained_files": self.retained_files,
            "kept": self.kept,
        }

    def header(self) -> str:
        head = {_IN_HEADER.get(k, k): v for k, v in asdict(self).items() if k not in _NOT_IN_HEADER}
        return json.dumps({**head, "type": "plan", "format": PLAN_FORMAT}, sort_keys=True)

    @staticmethod
    def parse(line: str, manifest: str) -> Plan:
        try:
            head = json.loads(line)
            if head.get("type") != "plan" or head.get("format") != PLAN_FORMAT:
                raise GcError(f"not a plan manifest of format {PLAN_FORMAT}", manifest)
            fields = {k: head[_IN_HEADER.get(k, k)] if k not in _OPTIONAL_IN_HEADER
                      else head.get(k, _OPTIONAL_IN_HEADER[k])
                      for k in Plan.__dataclass_fields__ if k not in _NOT_IN_HEADER}  # fmt: skip
            fields["commit_digests"] = {int(k): v for k, v in fields["commit_digests"].items()}
            return Plan(**fields, manifest=manifest)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise GcError(f"unreadable plan manifest: {exc}", manifest) from exc


# Not written in the header: where the manifest is, and the digest of the manifest itself.
_NOT_IN_HEADER = frozenset({"manifest", "digest"})
# Fields the header names otherwise: its keys are those of every earlier release.
_IN_HEADER = {"total_bytes": "bytes"}
# Absent from the headers of plans made before they were.
_OPTIONAL_IN_HEADER: dict[str, Any] = {
    "sst_floor": None,
    "quiet_seconds": POLICY.quiet_seconds,
    "folder_ids": {},
}
