"""The audit trail: where the actions keep their plans, manifests and outcome records, beside the
checkpoints, never inside one; and the folder that names a checkpoint there, which its maintenance
lease shares (`lease.lease_for`). Below the actions that write to it: it knows plans and records,
not how they are made. What it reads back is checked, never trusted (a manifest by its digest, a
record line by line), since anyone with access to the trail may have edited it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO, Protocol

from checkpoint import bounds
from checkpoint.errors import MALFORMED, CheckpointError, CorruptFileError, GcError
from checkpoint.format import AUDIT_FOLDER, RECORD_BYTES, bounded_lines
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report
from checkpoint.safety.manifest import Plan, PlannedFile
from checkpoint.safety.naming import folder_name
from checkpoint.storage import FileInfo, Storage, normalize_url

log = logging.getLogger(__name__)
_HELD, _HELD_LIMIT = "held.json", 4096
_HELD_MAX = 1 << 48
_HELD_PROGRESS = 100_000  # files between the progress lines of a listing of what a checkpoint holds
_HEADER_LIMIT = 64 << 10
# One append's records, as an object store keeps them (a part object each): a batch's outcomes.
PART_BYTES = 256 << 20


class Recordable(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


def _append(out: BinaryIO, path: str) -> None:
    """The bytes of the local file `path` after those of `out`: copied by the kernel where it can
    (sendfile), since a manifest at 10M files is 2 GB; else through this process."""
    out.flush()
    with open(path, "rb") as src:
        done, size = 0, os.fstat(src.fileno()).st_size
        try:
            while done < size and (sent := os.sendfile(out.fileno(), src.fileno(), done, size - done)):
                done += sent
        except OSError:  # no file-to-file sendfile here: copy what is left
            pass
        src.seek(done)
        shutil.copyfileobj(src, out)


def parse_held(data: bytes, since: float) -> tuple[int, int] | None:
    """(files, bytes) that `held.json` keeps for the dormancy from `since`; None for anything else
    (another dormancy's, not JSON, a count that is no whole number up to 2^48, `true` for 1). A
    checkpoint of 256 TiB is past any a listing counted; the fleet's totals of 10,000 such stay
    within the 64 bits Dagster's metadata takes."""
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and doc.get("since") == since:
            files = bounds.count(doc.get("files"), "files", high=_HELD_MAX)
            return files, bounds.count(doc.get("bytes"), "bytes", high=_HELD_MAX)
    except MALFORMED:
        pass
    return None


def sha256_of(path: str) -> str:
    """The sha256 of a local file: how a kept manifest (a cleanup plan's, a retirement's) is checked."""
    # In 64 KiB reads, the size of the copy's own buffer: a plan's memory is one partition's, and
    # a larger read would be the peak of a small checkpoint's plan (as large as a 1 MiB manifest).
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            digest.update(chunk)
    return digest.hexdigest()


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

    def write_manifest(self, plan: Plan, line_files: list[str]) -> Plan:
        """Writes a plan's manifest (its header, then the candidate lines of local files in order,
        streamed: a multipart upload on S3) and returns the plan with its URL."""
        rel = self._plan_rel(plan)
        with tempfile.TemporaryDirectory(prefix="ckpt-manifest-") as tmp:
            whole = os.path.join(tmp, "plan.jsonl")
            with open(whole, "wb") as out:  # bytes: the lines are ASCII, copied as they are
                out.write(plan.header().encode() + b"\n")
                for path in line_files:
                    _append(out, path)
            digest = sha256_of(whole)
            self.storage.put_file(whole, rel, move=True)
        return dataclasses.replace(plan, manifest=f"{self.url}/{rel}", digest=digest)

    def held(self, checkpoint: Storage, since: float, *, listing: bool = True) -> tuple[int, int] | None:
        """(files, bytes) a dormant checkpoint holds. It changes nothing while dormant, so it is
        listed once per dormancy (`listing`: else None when not known yet), a page at a time, and
        the figures kept in its folder of the trail with the time it is dormant since (`held.json`,
        also written by a retirement plan, which lists it anyway): a checkpoint that wrote again is
        dormant from a later time, and is listed again. What the file says is checked, never
        trusted: anything else (`parse_held`: a count that is no whole number up to 2^48, `true` for
        1, another dormancy's time) is as good as absent."""
        rel = self._held_rel(checkpoint)
        try:  # absent, oversized or unreadable: not known
            kept = parse_held(self.storage.read_many([rel], limit=_HELD_LIMIT)[rel], since)
        except CheckpointError:
            kept = None
        if kept is not None or not listing:
            return kept
        files = total = 0
        for page in checkpoint.pages():
            before, files, total = files, files + len(page), total + sum(f.size for f in page)
            if files // _HELD_PROGRESS > before // _HELD_PROGRESS:  # 10^7 files take a minute or two
                report(
                    log, Progress("files listed", files, None), "%s: %d files listed", checkpoint.url, files
                )
        self.keep_held(checkpoint, since, files, total)
        return files, total

    def keep_held(self, checkpoint: Storage, since: float, files: int, total: int) -> None:
        """Keeps what a listing of a checkpoint dormant since `since` found (see `held`)."""
        data = json.dumps({"since": since, "files": files, "bytes": total}).encode()
        self.storage.write(self._held_rel(checkpoint), data)

    def _held_rel(self, checkpoint: Storage) -> str:
        return f"{folder_name(checkpoint.url)}/{_HELD}"

    def _rel_of(self, url: str) -> str:
        if not url.startswith(self.url + "/"):
            raise GcError(f"not a plan of this audit trail ({self.url})", url)
        return url[len(self.url) + 1 :]

    def read_plan(self, url: str) -> Plan:
        """A plan's header: its first line, one small read whatever the manifest holds."""
        with self.storage.open(self._rel_of(url), block_size=64 << 10) as f:
            # A header is a few hundred bytes: no more is read, whatever the file holds after it.
            first = f.read(_HEADER_LIMIT).split(b"\n", 1)[0]
            return Plan.parse(first.decode("utf-8", "replace"), url)

    def verified_copy(self, plan: Plan, folder: str) -> str:
        """The plan's manifest copied into the local `folder`, its sha256 taken on the way; raises
        GcError unless that is `plan.digest` (which the caller holds from elsewhere: see Plan).
        An apply reads its candidates from this copy, so what it deletes is what was checked."""
        if not plan.digest:
            raise GcError("the plan carries no digest of its manifest to check it against: plan again",
                          plan.manifest)  # fmt: skip
        local = os.path.join(folder, "manifest.jsonl")
        self.storage.download(self._rel_of(plan.manifest), local)
        found = sha256_of(local)
        if found != plan.digest:
            raise GcError(f"the manifest is not the one planned (sha256 {found[:12]}..., planned "
                          f"{plan.digest[:12]}...): edited or replaced; nothing deleted",
                          plan.manifest)  # fmt: skip
        with open(local, "rb") as f:
            if Plan.parse(f.readline().decode(), plan.manifest).header() != plan.header():
                raise GcError("the manifest's header is not the plan's: nothing deleted", plan.manifest)
        return local

    def candidates(
        self, plan: Plan, chunk: int = POLICY.delete_batch_size, local: str | None = None
    ) -> Iterator[list[PlannedFile]]:
        """The plan's candidates in manifest order, `chunk` at a time, streamed from the manifest
        (or from its `local` copy)."""
        batch: list[PlannedFile] = []
        source: BinaryIO
        if local:
            source = open(local, "rb")
        else:
            source = self.storage.open(self._rel_of(plan.manifest), block_size=1 << 20)
        with source as f:
            lines = bounded_lines(f.read, RECORD_BYTES, plan.manifest)  # a line a file: never gigabytes
            try:
                next(lines, None)  # the header
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        batch.append(PlannedFile.parse(json.loads(line)))
                    except (json.JSONDecodeError, KeyError, TypeError) as exc:
                        raise GcError(f"unreadable plan manifest: {exc}", plan.manifest) from exc
                    if len(batch) == chunk:
                        yield batch
                        batch = []
            except CorruptFileError as exc:
                raise GcError(f"unreadable plan manifest: {exc}", plan.manifest) from exc
        if batch:
            yield batch

    def record(self, plan: Plan, outcomes: Sequence[Recordable]) -> None:
        """Appends a plan's outcomes as they happen (`append_records`)."""
        self.append_records(self._outcomes_rel(plan), [o.as_dict() for o in outcomes])

    def append_records(self, rel: str, records: Sequence[dict[str, Any]]) -> None:
        """Appends JSON lines, each stamped with the time, to the trail's file `rel`
        (Storage.append: fsynced locally; on object stores, which have no append, one part object
        per call beside the file)."""
        lines = "".join(json.dumps({"at": time.time(), **r}) + "\n" for r in records)
        self.storage.append(rel, lines.encode())

    def outcomes(self, plan: Plan) -> list[dict[str, Any]]:
        """Every outcome recorded for a plan, over all its applies, in order."""
        return self.records(self._outcomes_rel(plan))

    def records(self, rel: str) -> list[dict[str, Any]]:
        """Every line appended to `rel` (`append_records`), in order."""
        return list(self.each_record(rel))

    def each_record(self, rel: str) -> Iterator[dict[str, Any]]:
        """The lines appended to `rel` (`append_records`), in order, a line at a time (each at most
        RECORD_BYTES, however large the file says it is; on object stores a part, one append's
        lines, at most PART_BYTES: one GET each). A line that is not a record this tool wrote
        raises GcError: the trail is data someone may have edited."""
        for piece, stream in self.storage.appended(rel, part_limit=PART_BYTES):
            yield from self._parsed(bounded_lines(stream.read, RECORD_BYTES, self.storage.full(piece)), piece)

    def _parsed(self, lines: Iterable[bytes], rel: str) -> Iterator[dict[str, Any]]:
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (*MALFORMED, UnicodeDecodeError) as exc:
                raise GcError(f"an unreadable record in the audit trail ({exc}): look at it; nothing was "
                              "done", self.storage.full(rel)) from exc  # fmt: skip
            if not isinstance(record, dict):
                raise GcError("a record in the audit trail is not an object: look at it; nothing was done",
                              self.storage.full(rel))  # fmt: skip
            yield record

    def seal(self, plan: Plan) -> None:
        """A plan's outcomes as the one file that `outcomes_url` names (`seal_records`)."""
        self.seal_records(self._outcomes_rel(plan))

    def seal_records(self, rel: str) -> None:
        """Where the storage has no append (object stores), writes every part recorded so far as
        the one file `rel` (the parts stay: they are the record if a later run dies first). An
        appended file is that file already."""
        self.storage.seal_appended(
            rel, lambda: "".join(json.dumps(o) + "\n" for o in self.records(rel)).encode()
        )

    def _plans(self, checkpoint_url: str) -> dict[str, list[FileInfo]]:
        """Plan id -> its files (manifest, outcomes, outcome parts), from one listing of the
        checkpoint's own folder: never the whole trail."""
        folder = folder_name(checkpoint_url)
        out: dict[str, list[FileInfo]] = defaultdict(list)
        for f in self.storage.list_dir(folder).files:
            plan_id, _, rest = f.rel.rsplit("/", 1)[1].partition(".")
            if rest == "plan.jsonl" or rest.startswith("outcomes.jsonl"):
                out[plan_id].append(f)
        return out

    def latest_plan(self, checkpoint_url: str, *, applied: bool = True) -> Plan | None:
        """The newest plan of a checkpoint (plan ids sort by the time they were made), its header
        only: what `ckpt fleet` shows as reclaimable without planning again. `applied=False`: None
        when that plan has outcomes, since what an apply found is gone (or kept, with why), and its
        bytes are no longer there to reclaim."""
        plans = self._plans(checkpoint_url)
        with_manifest = [p for p, files in plans.items() if any(f.rel.endswith(".plan.jsonl") for f in files)]
        if not with_manifest:
            return None
        if not applied and any(".outcomes.jsonl" in f.rel for f in plans[max(with_manifest)]):
            return None
        return self.read_plan(f"{self.url}/{folder_name(checkpoint_url)}/{max(with_manifest)}.plan.jsonl")

    def prune(
        self,
        checkpoint_url: str,
        now: float,
        keep_seconds: float = POLICY.audit_retention_seconds,
        keep_newest: int = POLICY.audit_keep_plans,
    ) -> list[str]:
        """Removes a checkpoint's plans (with their outcomes) last written more than `keep_seconds`
        ago, beyond its newest `keep_newest`, and records the removal (`pruned.jsonl` in its
        folder) before it deletes. Returns the plan ids removed. A file without an mtime is kept."""
        plans = self._plans(checkpoint_url)
        older = sorted(plans)[: max(0, len(plans) - keep_newest)]
        gone = [
            p for p in older if all(f.mtime is not None and now - f.mtime > keep_seconds for f in plans[p])
        ]
        if not gone:
            return []
        rels = [f.rel for p in gone for f in plans[p]]
        record = {"at": now, "removed_plans": gone, "files": len(rels), "kept_newest": keep_newest,
                  "older_than_seconds": keep_seconds}  # fmt: skip
        self.storage.append(
            f"{folder_name(checkpoint_url)}/pruned.jsonl", (json.dumps(record) + "\n").encode()
        )
        failed: dict[str, str] = {}
        for start in range(0, len(rels), POLICY.delete_batch_size):
            failed.update(self.storage.delete_batch(rels[start : start + POLICY.delete_batch_size]))
        if failed:
            raise GcError(f"{len(failed)} audit files could not be removed: {next(iter(failed.values()))}",
                          f"{self.url}/{folder_name(checkpoint_url)}")  # fmt: skip
        return gone
