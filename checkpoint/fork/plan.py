"""The fork planned, pure: what recovery at batch N reads, named from the head-first model, with
the schema paths a fork rewrites. `copy` carries the plan out."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from checkpoint.analysis import FindingCode, Severity, Validation, batch_spans, validate
from checkpoint.errors import CorruptFileError, ForkRefused
from checkpoint.fork.markers import ForkStarted
from checkpoint.format import (
    MAX_SCHEMA_BYTES,
    FileKind,
    bound_of,
    classify,
    parse_operator_metadata,
    parse_sidecar,
)
from checkpoint.model import Checkpoint, StoreId, StoreLineage, load_head, store_folder, untrusted_files
from checkpoint.policy import POLICY
from checkpoint.storage import FileInfo, Storage

# The order of writes (see the module docstring): what a query starts from comes last.
STEP_STATE, STEP_OFFSETS, STEP_COMMITS, STEP_QUERY = range(4)


# A JSON string in operator metadata v2 naming a schema file: `"<root>/state/<op>/_stateSchema/..."`.
_SCHEMA_PATH = re.compile(r'"([^"]*?)/(state/\d+/_stateSchema/[^"]+)"')


@dataclass(frozen=True)
class ForkItem:
    """One file of the fork. `data` is written as is (a rewritten file, or one already read while
    planning); otherwise the file is copied from SRC. `crc` is the signed CRC32C its Spark sidecar
    records, which the bytes must match."""

    rel: str
    size: int
    step: int
    data: bytes | None = None
    crc: int | None = None
    # Format V1 writes no sidecars: its state files are checked as Spark reads them instead, by
    # their kind (the LZ4 or zstd block checksums of a delta, snapshot or changelog; a zip's CRCs).
    decode: FileKind | None = None


@dataclass(frozen=True)
class ForkSource:
    """All of SRC the planner needs, read head-first."""

    ckpt: Checkpoint  # the view as of the batch: no log file after it
    batch: int
    lineage: tuple[StoreLineage, ...]
    small: dict[str, bytes]  # query metadata, operator metadata v2 and sidecars, read whole
    source_logs: tuple[FileInfo, ...]
    schemas: tuple[FileInfo, ...]  # named by operator metadata v2, and per store under partition 0


@dataclass(frozen=True)
class ForkPlan:
    source: str
    dest: str
    batch: int
    query_id: str
    source_query_id: str | None
    items: tuple[ForkItem, ...]
    codec: str = "lz4"  # the state files' compression, for the items checked by decoding them

    @property
    def files(self) -> int:
        return len(self.items)

    @property
    def total_bytes(self) -> int:
        return sum(i.size for i in self.items)

    def started(self) -> ForkStarted:
        return ForkStarted(source=self.source, batch=self.batch, query_id=self.query_id,
                           new_query_id=self.query_id != self.source_query_id, files=self.files,
                           total_bytes=self.total_bytes, started=time.time())  # fmt: skip


def as_of(ckpt: Checkpoint, batch: int) -> Checkpoint:
    """The checkpoint as it was right after `batch` committed, in what its logs say: no offset,
    commit, or operator-metadata file of a later batch (what the fork will hold, validated as such)."""

    def kept(rel: str) -> bool:
        what = classify(rel)
        logs = (FileKind.OFFSET, FileKind.COMMIT, FileKind.OPERATOR_METADATA, FileKind.SOURCE_LOG)
        return what.kind not in logs or what.batch is None or what.batch <= batch

    return dataclasses.replace(
        ckpt,
        format_version=ckpt.states_at(batch).version,
        files=tuple(f for f in ckpt.files if kept(f.rel)),
        batches={b: e for b, e in ckpt.batches.items() if b <= batch},
        problems=tuple(p for p in ckpt.problems if kept(p.rel)),
    )


def read_source(storage: Storage, batch: int | None = None) -> ForkSource:
    """Reads what a fork of SRC at `batch` (default: the latest committed) needs, refusing with
    ForkRefused when SRC cannot be forked there: a batch not in the commit log, state files
    already pruned, or any error finding in SRC as of that batch."""
    ckpt = load_head(storage, strict=False, batches=None if batch is None else [batch])
    committed = sorted(b.id for b in ckpt.batches.values() if b.committed)
    if not committed:
        raise ForkRefused("no committed batch to fork at", storage.url)
    batch = committed[-1] if batch is None else batch
    if batch not in committed:
        raise ForkRefused(
            f"batch {batch} is not in the commit log (it holds batches {batch_spans(set(committed))})",
            storage.url,
        )
    view = as_of(ckpt, batch)
    if not ckpt.states.holds_state_of(view.states):  # the logs change format after the batch
        since = [b for b in committed if b > batch and ckpt.states.holds_state_of(ckpt.states_at(b))]
        raise ForkRefused(
            f"batch {batch} was written in {view.states.name}, and the checkpoint holds {ckpt.states.name} "
            f"state {f'from batch {since[0]}' if since else 'at its head'} (a migrated checkpoint keeps "
            "the logs of the batches before its migration, not their state files)"
            + (f": fork at batch {since[0]} or later" if since else ""),
            storage.url,
        )
    lineage = _refuse_on_errors(view, batch).lineage  # validated at the batch: its stores' lineage

    # Operator metadata v2 (to rewrite) and every chain file's sidecar (to check the copy against):
    # one GET each, a 404 for a file Spark wrote no sidecar for; side by side, as head-first reads.
    # A format whose files Spark writes no sidecar for (V1) has none to ask for.
    v2 = [f.rel for f in view.files if f.kind == FileKind.OPERATOR_METADATA and f.what.batch is not None]
    sidecars = [crc for e in lineage for f in _state_files(e) if (crc := view.states.sidecar_of(f.rel))]
    wanted = ["metadata", *v2, *sidecars]
    with ThreadPoolExecutor(POLICY.store_workers) as pool:
        # Each read to its kind's bound: a sidecar made a sparse file of gigabytes is refused in one
        # line after 4 KiB, never read whole side by side with the others.
        got = zip(wanted, pool.map(lambda rel: storage.read_if_exists(rel, limit=_bound(rel)), wanted),
                  strict=True)  # fmt: skip
        small = {rel: data for rel, data in got if data is not None}
        named = sorted({rel for f in v2 if f in small for _, rel in schema_refs(small[f], storage.full(f))})
        partition_zero = [f"{store_folder(StoreId(op.id, 0, name))}/_metadata/schema"
                          for op in view.operators.values() for name in op.store_names]  # fmt: skip
        found = dict(zip(named + partition_zero, pool.map(storage.stat, named + partition_zero), strict=True))
    if missing := [rel for rel in named if found[rel] is None]:
        raise ForkRefused(
            f"the schema file {missing[0]} that operator metadata names is not in the checkpoint", storage.url
        )
    if oversized := [i for i in found.values() if i is not None and i.size > MAX_SCHEMA_BYTES]:
        big = oversized[0]
        raise ForkRefused(f"the schema file {big.rel} holds {big.size:,} bytes, more than any Spark writes "
                          f"({MAX_SCHEMA_BYTES:,}): FILE_OVER_ITS_BOUND; nothing was written",
                          storage.url)  # fmt: skip
    return ForkSource(
        ckpt=view,
        batch=batch,
        lineage=lineage,
        small=small,
        source_logs=tuple(source_logs(storage, batch)),
        schemas=tuple(info for info in found.values() if info is not None),
    )


def _bound(rel: str) -> int:
    bound = bound_of(classify(rel).kind)
    assert bound is not None, rel  # metadata, operator metadata and sidecars all have one
    return bound


def _refuse_on_errors(view: Checkpoint, batch: int) -> Validation:
    validation = validate(view)
    # A moved checkpoint is what a fork repairs: its schema files are found at their place inside
    # SRC (read_source checks they exist) and the fork names them under DEST.
    errors = [
        f
        for f in validation.findings
        if f.severity == Severity.ERROR and f.code != FindingCode.MOVED_CHECKPOINT
    ]
    if not errors:
        return validation
    codes = sorted({f.code for f in errors})
    if codes == [FindingCode.COMMITTED_FILE_MISSING]:
        raise ForkRefused(
            f"the state files of batch {batch} are gone ({len(errors)} store(s) have no state file of "
            "its committed version): Spark's retention pruned them, or they were deleted; fork a later batch",
            view.url,
        )
    first = errors[0]
    raise ForkRefused(
        f"{len(errors)} error finding(s) as of batch {batch} ({', '.join(codes)}); first: {first.path}: "
        f"{first.message}",
        view.url,
    )


def _state_files(entry: StoreLineage):
    """The files loading one store reads: the committed zip (snapshot) alone, else base and chain."""
    if entry.committed_file is not None and entry.committed_file.kind.is_base:
        return (entry.committed_file,)
    return ((entry.base,) if entry.base is not None else ()) + entry.chain


def source_logs(storage: Storage, batch: int, first: int = 0) -> list[FileInfo]:
    """Every source's log files of batches `first` to `batch`, one shallow listing per source."""
    found = []
    for folder in storage.list_dir("sources").folders:
        for f in storage.list_dir(folder).files:
            what = classify(f.rel)
            if what.kind == FileKind.SOURCE_LOG and what.batch is not None and first <= what.batch <= batch:
                found.append(f)
    for _, refused in sorted(untrusted_files(storage, found).items()):
        raise refused  # before DEST is touched: a link outside, a FIFO
    return found


# ------------------------------------------------------------------------------------------------
# Planning (pure)


def schema_refs(raw: bytes, path: str) -> list[tuple[str, str]]:
    """(root, path relative to the checkpoint) of every absolute schema path in operator metadata v2."""
    refs = [(m.group(1), m.group(2)) for m in _SCHEMA_PATH.finditer(raw.decode("utf-8", "replace"))]
    for _, rel in refs:
        if ".." in rel.split("/"):
            raise CorruptFileError(f"schema path {rel} leaves the checkpoint", path)
    return refs


def rewrite_schema_paths(raw: bytes, dest_spark_url: str, path: str) -> bytes:
    """Operator metadata v2 with every absolute schema path moved under `dest_spark_url`. Refuses
    when the file still names an old root afterwards (a path this rewrite does not know)."""
    roots = {root for root, _ in schema_refs(raw, path)}
    out = _SCHEMA_PATH.sub(lambda m: json.dumps(f"{dest_spark_url}/{m.group(2)}"), raw.decode("utf-8"))
    stale = sorted(r for r in roots if r != dest_spark_url and f"{r}/" in out)
    if stale:
        raise ForkRefused(f"operator metadata still names {stale[0]} after its schema paths were moved", path)
    meta = parse_operator_metadata(out.encode(), path)  # still a file Spark reads, naming only DEST
    stray = [p for store in meta.stores for p in store.schema_paths if not p.startswith(f"{dest_spark_url}/")]
    if stray:
        raise ForkRefused(f"operator metadata names a schema outside the checkpoint: {stray[0]}", path)
    return out.encode()


@dataclass(frozen=True)
class ForkPlanOptions:
    dest: Storage  # where the files go: its URL is written into the operator metadata's schema paths
    query_id: str | None = None  # DEST's query id; None keeps SRC's


def plan_fork(src: ForkSource, options: ForkPlanOptions) -> ForkPlan:
    """Every file DEST receives, in write order."""
    ckpt, batch = src.ckpt, src.batch
    dest, query_id = options.dest, options.query_id
    items: list[ForkItem] = []

    def add(f: FileInfo, step: int = STEP_STATE, data: bytes | None = None, **more: Any) -> None:
        items.append(ForkItem(f.rel, len(data) if data is not None else f.size, step, data, **more))

    for entry in src.lineage:
        for f in _state_files(entry):
            sidecar = src.small.get(f"{f.rel}.crc")
            crc = parse_sidecar(sidecar, ckpt.storage.full(f"{f.rel}.crc")) if sidecar is not None else None
            add(
                f.info,
                crc=None if crc is None else crc.value,
                decode=ckpt.states.fork_decode(f.kind),
            )
            if sidecar is not None:
                add(FileInfo(f"{f.rel}.crc", len(sidecar), None), data=sidecar)
            if f.kind.lists_files:
                items.extend(_zip_members(ckpt, f, entry.store))
    for f in ckpt.files:
        if f.kind != FileKind.OPERATOR_METADATA:
            continue
        if f.what.batch is None:  # v1: no paths in it
            add(f.info)
            continue
        data = rewrite_schema_paths(src.small[f.rel], dest.spark_url, ckpt.storage.full(f.rel))
        add(f.info, data=data)
    for f in (*src.schemas, *src.source_logs):
        add(f)
    for f in ckpt.files:
        if (
            f.kind in (FileKind.OFFSET, FileKind.COMMIT)
            and f.what.batch is not None
            and f.what.batch <= batch
        ):
            add(f.info, STEP_OFFSETS if f.kind == FileKind.OFFSET else STEP_COMMITS)
    original = src.small.get("metadata")
    if original is None or ckpt.query_id is None:
        raise ForkRefused("the checkpoint has no readable query metadata file", ckpt.storage.full("metadata"))
    new_id = query_id or ckpt.query_id
    metadata = (
        original if new_id == ckpt.query_id else json.dumps({"id": new_id}, separators=(",", ":")).encode()
    )
    add(FileInfo("metadata", len(original), None), STEP_QUERY, metadata)
    return ForkPlan(
        ckpt.url, dest.url, batch, new_id, ckpt.query_id, tuple(_unique(items)), ckpt.changelog_codec
    )


def _zip_members(ckpt: Checkpoint, zf, sid: StoreId) -> list[ForkItem]:
    """The SSTs and archived logs a zip lists, with the sizes its metadata records (what a load checks)."""
    snap = ckpt.read_snapshot(zf)
    folder = store_folder(sid)
    members = [(f"{folder}/SSTs/{r.dfs_name}", r.size) for r in snap.metadata.sst_files]
    members += [(f"{folder}/logs/{r.dfs_name}", r.size) for r in snap.metadata.log_files]
    return [ForkItem(rel, size, STEP_STATE) for rel, size in members]


def _unique(items: list[ForkItem]) -> list[ForkItem]:
    # Zips of one store share SSTs; a rel appears once, in its first (earliest) step.
    seen: set[str] = set()
    out = []
    for item in sorted(items, key=lambda i: i.step):
        if item.rel not in seen:
            seen.add(item.rel)
            out.append(item)
    return out


# ------------------------------------------------------------------------------------------------
# DEST
