"""The fork's two markers in DEST, as typed records: `_ckpt_fork.json` (what a fork set out to
write, before its first file) and `_ckpt_fork.complete.json` (its result, written last). Their
JSON keys are those every earlier release wrote and read; a marker this tool cannot read refuses
the fork, since DEST then holds something it did not write."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

from checkpoint.errors import ForkRefused


def _json(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True).encode()


def _unreadable(why: object, path: str) -> ForkRefused:
    return ForkRefused(f"unreadable fork marker ({why}): not a fork this tool can finish", path)


def _fields(raw: bytes, path: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise _unreadable(exc, path) from exc
    if not isinstance(doc, dict):
        raise _unreadable("not an object", path)
    return doc


@dataclass(frozen=True)
class ForkStarted:
    source: str
    batch: int
    query_id: str
    new_query_id: bool
    files: int
    total_bytes: int
    started: float

    def to_json(self) -> bytes:
        fields = dataclasses.asdict(self)
        fields["bytes"] = fields.pop("total_bytes")
        return _json(fields)

    @staticmethod
    def parse(raw: bytes, path: str) -> ForkStarted:
        doc = _fields(raw, path)
        try:
            return ForkStarted(
                source=str(doc["source"]), batch=int(doc["batch"]), query_id=str(doc.get("query_id") or ""),
                new_query_id=bool(doc.get("new_query_id")), files=int(doc.get("files") or 0),
                total_bytes=int(doc.get("bytes") or 0), started=float(doc.get("started") or 0.0),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ForkRefused(
                f"unreadable fork marker (no {exc}): not a fork this tool can finish", path
            ) from exc


@dataclass(frozen=True)
class ForkResult:
    """What a fork wrote; also the completion marker's content, with the time it was written."""

    source: str
    dest: str
    batch: int
    query_id: str
    files: int  # what DEST holds: exactly what recovery at the batch reads
    total_bytes: int
    copied_files: int  # by this run (a resumed fork copies only what was missing)
    copied_bytes: int
    resumed_files: int  # already in DEST from an interrupted run, checked and kept
    server_side_files: int  # copied by the object store itself, never downloaded
    seconds: float
    requests: int  # storage requests to SRC and DEST together
    already_complete: bool = False
    # Given a second name instead of copied (`link`): local state and log files, immutable once written
    linked_files: int = 0

    def as_dict(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        fields["bytes"] = fields.pop("total_bytes")
        return fields

    def to_json(self) -> bytes:
        fields = self.as_dict()
        del fields["already_complete"]
        return _json({**fields, "finished": time.time()})

    @staticmethod
    def parse(raw: bytes, path: str) -> ForkResult:
        """A completion marker, as the result of the fork that is already complete."""
        doc = _fields(raw, path)
        doc["total_bytes"] = doc.pop("bytes", 0)
        known = {f.name for f in dataclasses.fields(ForkResult)} - {"already_complete"}
        try:
            return ForkResult(**{k: v for k, v in doc.items() if k in known}, already_complete=True)
        except TypeError as exc:
            raise ForkRefused(
                f"unreadable fork marker ({exc}): not a fork this tool can finish", path
            ) from exc
