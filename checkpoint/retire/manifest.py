"""A retirement plan as it is kept in the audit trail: a header (the evidence the checkpoint is
dormant, its totals, the archive) and one line per file it held, in path order. The plan writes
it, a person reads it, the apply checks the checkpoint against it. A name read from it is data,
compared with a listing, never a path that is opened or deleted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from checkpoint.analysis import utc_minute
from checkpoint.cleanup import AuditTrail
from checkpoint.errors import MALFORMED, RetirementRefused
from checkpoint.safety import folder_name
from checkpoint.storage import FileInfo

RETIREMENT_FORMAT = 1
_MANIFEST, _OUTCOMES = ".retire.jsonl", ".retire-outcomes.jsonl"
# A header is a few hundred bytes; a longer first line is not one this tool wrote.
HEADER_LIMIT = 64 << 10


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
        """The header, every field checked for its type: refused, never a traceback, when it is
        not one this tool wrote."""
        try:
            head = json.loads(line)
            if head.get("type") != "retirement" or head.get("format") != RETIREMENT_FORMAT:
                raise RetirementRefused(f"not a retirement manifest of format {RETIREMENT_FORMAT}", manifest)
            evidence = Evidence(**head["evidence"])
            plan = RetirementPlan(
                plan_id=head["plan_id"], checkpoint=head["checkpoint"], planned_at=head["planned_at"],
                evidence=evidence, files=head["files"], total_bytes=head["bytes"],
                newest_file_at=head["newest_file_at"], archive=head["archive"], manifest=manifest,
            )  # fmt: skip
        except RetirementRefused:
            raise
        except (json.JSONDecodeError, *MALFORMED) as exc:
            raise RetirementRefused(f"unreadable retirement manifest: {exc}", manifest) from exc
        texts = (plan.plan_id, plan.checkpoint)
        numbers = (plan.planned_at, evidence.dormant_since, evidence.dormant_seconds)
        counts = (plan.files, plan.total_bytes)
        if (
            not all(isinstance(t, str) and t for t in texts)
            or not (plan.archive is None or isinstance(plan.archive, str))
            or not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)
        ):
            raise RetirementRefused("unreadable retirement manifest: a field of the wrong type", manifest)
        return plan


def file_line(f: FileInfo) -> bytes:
    return (json.dumps({"path": f.rel, "bytes": f.size, "mtime": f.mtime}) + "\n").encode()


def parse_file_line(line: bytes, manifest: str) -> tuple[str, int, float | None]:
    try:
        row = json.loads(line)
        path, size, mtime = row["path"], row["bytes"], row["mtime"]
        if isinstance(path, str) and isinstance(size, int) and (mtime is None or isinstance(mtime, float)):
            return path, size, mtime
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
        first, newline, _ = fh.read(HEADER_LIMIT + 1).partition(b"\n")
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


def planned_files(trail: AuditTrail, plan: RetirementPlan) -> Iterator[tuple[str, int, float | None]]:
    """The manifest's files in its order (the plan wrote them sorted by path), streamed: an apply
    holds the checkpoint's listing, never the manifest too. Raises RetirementRefused when it
    lists another number of files than its header says."""
    rel, count = manifest_rel(plan.checkpoint, plan.plan_id), 0
    with trail.storage.open(rel, block_size=1 << 20) as fh:
        fh.readline()  # the header, read and checked before
        for line in fh:
            if line.strip():
                count += 1
                yield parse_file_line(line, plan.manifest)
    if count != plan.files:
        raise RetirementRefused(f"the manifest lists {count} files, its header {plan.files}: edited",
                                plan.manifest)  # fmt: skip
