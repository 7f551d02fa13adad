"""A retirement plan as it is kept in the audit trail: a header (the evidence the checkpoint is
dormant, its totals, the archive) and one line per file it held, in path order. The plan writes
it, a person reads it, the apply checks the checkpoint against it. A name read from it is data,
compared with a listing, never a path that is opened or deleted."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from checkpoint import bounds
from checkpoint.analysis import utc_minute
from checkpoint.errors import MALFORMED, RetirementRefused
from checkpoint.safety import AuditTrail, folder_name
from checkpoint.storage import FileInfo

RETIREMENT_FORMAT = 1
_MANIFEST, _OUTCOMES = ".retire.jsonl", ".retire-outcomes.jsonl"
# A header is a few hundred bytes; a longer first line is not one this tool wrote.
HEADER_LIMIT = 64 << 10
_PLAN_ID = re.compile(r"\d{8}T\d{9}Z-[0-9a-f]{8}")  # `cleanup.new_plan_id`
T = TypeVar("T")


def is_plan_id(text: str) -> bool:
    return _PLAN_ID.fullmatch(text) is not None


@dataclass(frozen=True)
class Evidence:
    """Why the checkpoint is taken for dormant: its newest commit and offset, and when."""

    last_commit: int | None
    last_commit_at: float | None
    last_offset: int | None
    last_offset_at: float | None
    dormant_since: float
    dormant_seconds: float  # the period it was judged by


@dataclass(frozen=True)
class RetirementPlan:
    plan_id: str
    checkpoint: str  # its URL, one spelling
    planned_at: float
    evidence: Evidence
    files: int
    total_bytes: int  # "bytes" in the header
    newest_file_at: float | None  # the newest mtime of any file it held
    archive: str | None  # None: `--no-archive`, said when planned
    manifest: str = ""  # its URL in the audit trail

    def header(self) -> str:
        head = {k: v for k, v in asdict(self).items() if k not in ("manifest", "total_bytes")}
        return json.dumps({**head, "bytes": self.total_bytes, "type": "retirement",
                           "format": RETIREMENT_FORMAT}, sort_keys=True)  # fmt: skip

    def summary(self) -> dict[str, Any]:
        return {"plan_id": self.plan_id, "checkpoint": self.checkpoint, "planned_at": self.planned_at,
                "evidence": asdict(self.evidence), "files": self.files, "bytes": self.total_bytes,
                "archive": self.archive, "manifest": self.manifest}  # fmt: skip

    @staticmethod
    def parse(line: bytes, manifest: str) -> RetirementPlan:
        """The header, every field checked for its type and range (a number finite, a count no
        bool, a time between 1970 and 2200): refused, never a traceback, when it is not one this
        tool wrote."""
        try:
            head = json.loads(line)
            if head.get("type") != "retirement" or head.get("format") != RETIREMENT_FORMAT:
                raise RetirementRefused(f"not a retirement manifest of format {RETIREMENT_FORMAT}", manifest)
            raw = head["evidence"]
            evidence = Evidence(
                last_commit=_optional(raw["last_commit"], bounds.count, "last_commit"),
                last_commit_at=bounds.optional_instant(raw["last_commit_at"], "last_commit_at"),
                last_offset=_optional(raw["last_offset"], bounds.count, "last_offset"),
                last_offset_at=bounds.optional_instant(raw["last_offset_at"], "last_offset_at"),
                dormant_since=bounds.instant(raw["dormant_since"], "dormant_since"),
                dormant_seconds=bounds.seconds(raw["dormant_seconds"], "dormant_seconds", low=1.0),
            )  # fmt: skip
            plan = RetirementPlan(
                plan_id=_text(head["plan_id"], "plan_id"), checkpoint=_text(head["checkpoint"], "checkpoint"),
                planned_at=bounds.instant(head["planned_at"], "planned_at"), evidence=evidence,
                files=bounds.count(head["files"], "files"), total_bytes=bounds.count(head["bytes"], "bytes"),
                newest_file_at=bounds.optional_instant(head["newest_file_at"], "newest_file_at"),
                archive=_optional(head["archive"], _text, "archive"), manifest=manifest,
            )  # fmt: skip
        except RetirementRefused:
            raise
        except (json.JSONDecodeError, *MALFORMED) as exc:
            raise RetirementRefused(f"unreadable retirement manifest: {exc}", manifest) from exc
        if not is_plan_id(plan.plan_id):
            raise RetirementRefused(f"unreadable retirement manifest: {plan.plan_id[:40]!r} is not a plan id",
                                    manifest)  # fmt: skip
        return plan


_TEXT_LIMIT = 4096  # a URL or a path: longer is not one this tool wrote


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _TEXT_LIMIT or "\x00" in value:
        raise bounds.OutOfRange(f"{what} is not a text of 1 to {_TEXT_LIMIT} characters")
    return value


def _optional(value: Any, read: Callable[[Any, str], T], what: str) -> T | None:
    return None if value is None else read(value, what)


def file_line(f: FileInfo) -> bytes:
    return (json.dumps({"path": f.rel, "bytes": f.size, "mtime": f.mtime}) + "\n").encode()


def parse_file_line(line: bytes, manifest: str) -> tuple[str, int, float | None]:
    try:
        row = json.loads(line)
        # An mtime is whatever the storage stamped (0 included), so only finite is asked of it.
        mtime = row["mtime"]
        mtime = None if mtime is None else bounds.real(mtime, "mtime", low=-bounds.MAX_INSTANT,
                                                       high=bounds.MAX_INSTANT)  # fmt: skip
        return _text(row["path"], "path"), bounds.count(row["bytes"], "bytes"), mtime
    except (json.JSONDecodeError, *MALFORMED):
        pass
    raise RetirementRefused(f"unreadable retirement manifest line: {line[:80]!r}", manifest)


def when(t: float | None) -> str:
    return "-" if t is None else utc_minute(t)


def manifest_rel(checkpoint_url: str, plan_id: str) -> str:
    """Where a plan's manifest lies in an audit trail: the checkpoint's own folder there."""
    return f"{folder_name(checkpoint_url)}/{plan_id}{_MANIFEST}"


def manifest_url(trail: AuditTrail, checkpoint_url: str, plan_id: str) -> str:
    return f"{trail.url}/{manifest_rel(checkpoint_url, plan_id)}"


def outcomes_rel(plan: RetirementPlan) -> str:
    return f"{folder_name(plan.checkpoint)}/{plan.plan_id}{_OUTCOMES}"


def read_retirement(
    manifest_url: str, storage_options: dict[str, Any] | None = None
) -> tuple[AuditTrail, RetirementPlan]:
    """The audit trail a manifest lies in and the plan's header. The manifest must lie in the
    checkpoint's own folder of that trail, under its plan id: one copied elsewhere is refused."""
    url = manifest_url.rstrip("/")
    trail_url, folder, name = (url.rsplit("/", 2) + ["", ""])[:3] if url.count("/") >= 2 else ("", "", "")
    if not name.endswith(_MANIFEST) or not trail_url:
        raise RetirementRefused(
            f"not a retirement manifest (<audit trail>/<checkpoint>/<plan id>{_MANIFEST})", manifest_url
        )
    trail = AuditTrail(trail_url, storage_options)
    rel = f"{folder}/{name}"
    with trail.storage.open(rel, block_size=HEADER_LIMIT) as fh:
        head = fh.read(HEADER_LIMIT + 1)
    first, newline, _ = head.partition(b"\n")
    if not head:
        raise RetirementRefused("the manifest is empty: not one this tool wrote; plan again", manifest_url)
    if not newline and len(head) <= HEADER_LIMIT:
        raise RetirementRefused(f"the manifest ends within its header ({len(head)} bytes, no end of line): "
                                "truncated; plan again", manifest_url)  # fmt: skip
    if not newline:
        raise RetirementRefused(
            f"the manifest's header is over {HEADER_LIMIT} bytes: not one this tool wrote", manifest_url
        )
    plan = RetirementPlan.parse(first, f"{trail.url}/{rel}")
    if rel != manifest_rel(plan.checkpoint, plan.plan_id):
        kept = manifest_rel(plan.checkpoint, plan.plan_id)
        raise RetirementRefused(f"the manifest is not where its plan keeps it ({kept}): moved or edited",
                                manifest_url)  # fmt: skip
    return trail, plan


def planned_files(local: str, plan: RetirementPlan) -> Iterator[tuple[str, int, float | None]]:
    """The files of the manifest's `local` copy in its order (the plan wrote them sorted by
    path), streamed: an apply holds the checkpoint's listing, never the manifest too. Raises
    RetirementRefused when it lists another number of files than its header says."""
    count = 0
    with open(local, "rb") as fh:
        fh.readline()  # the header, read and checked before
        for line in fh:
            if line.strip():
                count += 1
                yield parse_file_line(line, plan.manifest)
    if count != plan.files:
        raise RetirementRefused(f"the manifest lists {count} files, its header {plan.files}: edited",
                                plan.manifest)  # fmt: skip
