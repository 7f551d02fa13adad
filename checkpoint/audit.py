"""The audit trail: where a checkpoint's cleanup plans and their outcomes are kept, beside the
checkpoints, never inside one; and the folder that names a checkpoint there, which its maintenance
lease shares (`lease.lease_for`). Below the actions that write to it: it knows plans and outcome
records, not how they are made.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any, Protocol

from .gc_plan import GcError, Plan
from .storage import Storage, normalize_url

AUDIT_FOLDER = "_ckpt_audit"  # beside the checkpoints, never inside one


class Recordable(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


def folder_name(checkpoint_url: str) -> str:
    """A checkpoint's folder in an audit trail: its name and a digest of its one spelling."""
    url = normalize_url(checkpoint_url)
    digest = hashlib.sha256(url.encode()).hexdigest()[:8]
    return f"{url.rsplit('/', 1)[-1]}-{digest}"


class AuditTrail:
    """Where plans and outcomes are kept: beside the checkpoints, never inside one."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        self.storage = Storage(url, storage_options)
        self.url = self.storage.url

    @staticmethod
    def default_for(checkpoint_url: str) -> str:
        parent = normalize_url(checkpoint_url).rpartition("/")[0]
        if parent.endswith(":/"):
            raise GcError("a checkpoint at the top of a bucket has no folder beside it for its audit "
                          "trail: name one", checkpoint_url)  # fmt: skip
        return f"{parent}/{AUDIT_FOLDER}"

    def _folder(self, plan: Plan) -> str:
        return folder_name(plan.checkpoint)

    def _plan_rel(self, plan: Plan) -> str:
        return f"{self._folder(plan)}/{plan.plan_id}.plan.jsonl"

    def _outcomes_rel(self, plan: Plan) -> str:
        return f"{self._folder(plan)}/{plan.plan_id}.outcomes.jsonl"

    def plan_url(self, plan: Plan) -> str:
        return f"{self.url}/{self._plan_rel(plan)}"

    def outcomes_url(self, plan: Plan) -> str:
        return f"{self.url}/{self._outcomes_rel(plan)}"

    def write_plan(self, plan: Plan) -> str:
        self.storage.write(self._plan_rel(plan), plan.to_jsonl().encode())
        return self.plan_url(plan)

    def read_plan(self, url: str) -> Plan:
        if not url.startswith(self.url + "/"):
            raise GcError(f"not a plan of this audit trail ({self.url})", url)
        return Plan.from_jsonl(self.storage.read_bytes(url[len(self.url) + 1 :]).decode(), url)

    def record(self, plan: Plan, outcomes: Sequence[Recordable]) -> None:
        """Appends outcomes as they happen (Storage.append: fsynced locally; on object stores,
        which have no append, one part object per call beside the outcomes file)."""
        lines = "".join(json.dumps({"at": time.time(), **o.as_dict()}) + "\n" for o in outcomes)
        self.storage.append(self._outcomes_rel(plan), lines.encode())

    def outcomes(self, plan: Plan) -> list[dict[str, Any]]:
        """Every outcome recorded for a plan, over all its applies, in order."""
        if self.storage.is_local:
            data = self.storage.read_if_exists(self._outcomes_rel(plan)) or b""
        else:
            data = b"".join(self.storage.read_many(self._parts(plan)).values())
        return [json.loads(line) for line in data.decode().splitlines() if line.strip()]

    def _parts(self, plan: Plan) -> list[str]:
        rel = self._outcomes_rel(plan)
        names = [f.rel for f in self.storage.list_dir(self._folder(plan)).files]
        parts = [r for r in names if r.startswith(rel + ".") and r[len(rel) + 1 :].isdigit()]
        return sorted(parts, key=lambda r: int(r.rsplit(".", 1)[1]))

    def seal(self, plan: Plan) -> None:
        """On object stores, writes every part recorded so far as the one outcomes file that
        `outcomes_url` names (the parts stay: they are the record if a later apply dies first).
        A local outcomes file is that file already."""
        if not self.storage.is_local:
            lines = "".join(json.dumps(o) + "\n" for o in self.outcomes(plan))
            self.storage.write(self._outcomes_rel(plan), lines.encode())
