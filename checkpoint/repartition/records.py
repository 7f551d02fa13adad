"""A repartition's records, typed, and where they live in the audit trail:
`<audit>/<checkpoint>/repartitions/<id>.*`: `started.json` (preflight, backup, the digests before),
`before.jsonl` (the files before), `finished.json` (the outcome) and `undone.json` (a later undo).
A started record with no finished one is an unfinished repartition: the next run finishes it
(Spark resumes its own batch) or takes it back. JSON keys are those earlier releases wrote."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

from checkpoint.errors import CheckpointError
from checkpoint.format import RECORD_BYTES, TRAIL_LOG_BYTES
from checkpoint.repartition.guards import Before, Preflight
from checkpoint.safety import AuditTrail, folder_name

REPARTITIONED, UNDONE = "repartitioned", "undone"


@dataclass(frozen=True)
class StoreDigest:
    """One store's rows as Spark's state data source reads them: how many, a digest of their
    multiset (order and placement aside, every byte counted), and how many sit outside the
    partition Spark's hash gives their key."""

    operator: int
    store: str
    rows: int
    digest: str
    misplaced: int


@dataclass(frozen=True)
class StoreProof:
    """One store after the rewrite: its rows, placed where Spark's hash puts them, the same
    multiset as before."""

    operator: int
    store: str
    rows: int
    misplaced: int
    digest_before: str
    digest_after: str


@dataclass(frozen=True)
class RepartitionResult:
    checkpoint: str
    repartition_id: str
    outcome: str
    from_partitions: int
    to_partitions: int
    batch: int
    backup: str | None
    stores: list[StoreProof]
    seconds: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Undone:
    checkpoint: str
    repartition_id: str
    reason: str
    deleted: int  # files the undo took away
    outcome: str = UNDONE

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Started:
    """Written once the backup and the digests before are taken, before Spark rewrites anything."""

    repartition_id: str
    checkpoint: str
    preflight: Preflight
    to_partitions: int
    backup: str | None
    backup_linked_files: int
    digests: list[StoreDigest]

    @property
    def batch(self) -> int:
        return self.preflight.batch

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "batch": self.batch}

    @staticmethod
    def parse(doc: dict[str, Any]) -> Started:
        pre = dict(doc["preflight"])
        pre["operators"] = {int(k): v for k, v in pre["operators"].items()}
        return Started(
            repartition_id=doc["repartition_id"], checkpoint=doc["checkpoint"], preflight=Preflight(**pre),
            to_partitions=int(doc["to_partitions"]), backup=doc.get("backup"),
            backup_linked_files=int(doc.get("backup_linked_files") or 0),
            digests=[StoreDigest(**d) for d in doc["digests"]],
        )  # fmt: skip


@dataclass(frozen=True)
class Latest:
    """The newest started repartition and how it ended, if it did."""

    started: Started
    outcome: str | None  # its finished record's, or None while unfinished
    undone: bool  # undone since, on request

    @property
    def taken_back(self) -> bool:
        return self.undone or self.outcome == UNDONE


class Records:
    def __init__(self, audit: AuditTrail, checkpoint_url: str):
        self.audit = audit
        self.folder = f"{folder_name(checkpoint_url)}/repartitions"

    def rel(self, rid: str, what: str) -> str:
        return f"{self.folder}/{rid}.{what}"

    def url(self, rid: str, what: str) -> str:
        return f"{self.audit.url}/{self.rel(rid, what)}"

    def _write(self, rid: str, what: str, doc: dict[str, Any]) -> None:
        data = json.dumps({"at": time.time(), **doc}, indent=1).encode()
        self.audit.storage.write(self.rel(rid, what), data)

    def start(self, started: Started) -> None:
        self._write(started.repartition_id, "started.json", started.as_dict())

    def finish(self, rid: str, result: RepartitionResult | Undone) -> None:
        self._write(rid, "finished.json", result.as_dict())

    def undo(self, undone: Undone) -> None:
        self._write(undone.repartition_id, "undone.json", undone.as_dict())

    def write_before(self, rid: str, before: Before) -> None:
        self.audit.storage.write(self.rel(rid, "before.jsonl"), before.data())

    def before(self, rid: str) -> Before:
        return Before.parse(
            self.audit.storage.read_bytes(self.rel(rid, "before.jsonl"), limit=TRAIL_LOG_BYTES),
            self.url(rid, "before"),
        )

    def _read(self, rid: str, what: str) -> dict[str, Any] | None:
        data = self.audit.storage.read_if_exists(self.rel(rid, what), limit=RECORD_BYTES)
        if data is None:
            return None
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise CheckpointError(f"unreadable repartition record: {exc}", self.url(rid, what)) from exc
        return doc

    def latest(self) -> Latest | None:
        """The newest started repartition, with how it ended."""
        names = [f.rel.rsplit("/", 1)[1] for f in self.audit.storage.list_dir(self.folder).files]
        started = sorted(n[: -len(".started.json")] for n in names if n.endswith(".started.json"))
        if not started:
            return None
        rid = started[-1]
        doc = self._read(rid, "started.json")
        if doc is None:
            raise CheckpointError("a repartition record vanished while read", self.url(rid, "started.json"))
        try:
            record = Started.parse(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(
                f"unreadable repartition record: {exc!r}", self.url(rid, "started.json")
            ) from exc
        finished = self._read(rid, "finished.json")
        return Latest(record, None if finished is None else str(finished.get("outcome")),
                      self._read(rid, "undone.json") is not None)  # fmt: skip
