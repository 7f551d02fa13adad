"""Changing a stopped query's state partition count: what must hold before Spark's repartitioner
runs (the flow's `preflight` asks it in order), what it may add, and how to take that away again.

Spark (4.2+, `StreamingCheckpointManager.repartition`) does the rewrite: it writes one batch,
`latest + 1`, whose offsets repeat the latest batch's source positions under the new
`spark.sql.shuffle.partitions`, a commit, and state version `latest + 2` in every new partition
folder. It adds files and changes none, so a checkpoint is put back exactly as it was by deleting
what a listing taken before the rewrite did not hold (`Before`, kept in the audit trail). The
flow reaches Spark (rewrite, row digests, placement) through `flow.StateEngine`; this module
reads only what the head-first loader gives and lists only the folders an undo must compare.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from checkpoint.errors import CheckpointError, RepartitionRefused
from checkpoint.format import RAW_FAMILIES, SHUFFLE_PARTITIONS, FileKind, OffsetEntry
from checkpoint.model import Checkpoint, state_partition_folders
from checkpoint.storage import DELETE_MAX_KEYS, FileInfo, Storage

# The operators whose state Spark's repartitioner can re-key (its StatePartitionKeyExtractorFactory
# in 4.3): any other operator name makes it fail, so preflight refuses it first.
SUPPORTED_OPERATORS = frozenset({
    "stateStoreSave",
    "dedupe",
    "dedupeWithinWatermark",
    "sessionWindowStateStoreSaveExec",
    "symmetricHashJoin",
    "flatMapGroupsWithState",
    "applyInPandasWithState",
    "transformWithStateExec",
    "transformWithStateInPandasExec",
    "transformWithStateInPySparkExec",
})  # fmt: skip
_LOG_FOLDERS = ("offsets", "commits")
_OPERATOR_FOLDERS = ("_metadata", "_stateSchema")  # state/<op>/...: operator metadata v1 and v2, schemas


@dataclass(frozen=True)
class Preflight:
    """What a repartition starts from."""

    checkpoint: str
    latest_batch: int  # the latest committed batch before the repartition
    from_partitions: int
    to_partitions: int
    operators: dict[int, str]
    # an earlier repartition to `to_partitions` that wrote its batch but no commit: finished now
    resumes: int | None = None
    # Spark's repartitioner and state reader run in a session of the checkpoint's format version
    format_version: int = 2

    @property
    def batch(self) -> int:
        """The batch the repartition writes."""
        return self.latest_batch + 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_repartition_batch(ckpt: Checkpoint, batch: int) -> bool:
    """A batch that reads no new input (its sources repeat the batch before) under another
    partition count: what Spark's repartitioner writes."""
    this, before = ckpt.batches.get(batch), ckpt.batches.get(batch - 1)
    if this is None or before is None or this.offset is None or before.offset is None:
        return False
    return _same_input(this.offset, before.offset) and (
        this.offset.shuffle_partitions != before.offset.shuffle_partitions
    )


def _same_input(a: OffsetEntry, b: OffsetEntry) -> bool:
    return a.sources == b.sources


def partition_count(ckpt: Checkpoint, batch: int) -> int:
    entry = ckpt.batches.get(batch)
    count = None if entry is None or entry.offset is None else entry.offset.shuffle_partitions
    if count is None:
        raise RepartitionRefused(f"offsets/{batch} names no {SHUFFLE_PARTITIONS}", ckpt.url)
    return count


def refuse_if_live(ckpt: Checkpoint, now: float, quiet_seconds: float, own_batch: int | None = None) -> None:
    """Refuses when a commit or offset (but those of `own_batch`, a repartition's own batch) was
    written within the quiet period, or is undated: the query may be running."""
    recent = [
        f.rel
        for f in ckpt.files
        if f.kind in (FileKind.COMMIT, FileKind.OFFSET)
        and f.what.batch != own_batch
        and (f.info.mtime is None or now - f.info.mtime < quiet_seconds)
    ]
    if recent:
        raise RepartitionRefused(
            f"the query may be running: {recent[-1]} was written less than {quiet_seconds:.0f} s ago "
            "(stop it, and wait for the quiet period to pass)",
            ckpt.url,
        )


# ------------------------------------------------------------------------------------------------
# What Spark's state data source must read to compare every store before and after


@dataclass(frozen=True)
class StateReader:
    """One store as Spark's repartitioner reads it: the state data source with its internal
    `_readAllColumnFamilies`, which gives every column family's raw key and value bytes (TTL
    indexes and timers included) and, as `partition_key`, the key Spark's own extractor takes from
    each row to place it (a join's key without its index, a session without its start)."""

    operator: int
    store: str

    @property
    def options(self) -> dict[str, str]:
        return {"operatorId": str(self.operator), "storeName": self.store, **RAW_FAMILIES}


def state_readers(ckpt: Checkpoint) -> list[StateReader]:
    """Every store of every operator, from the operator metadata the head-first load read (a
    join of state format 2 has four stores; column families are read within their store)."""
    return [
        StateReader(op, store) for op, meta in sorted(ckpt.operators.items()) for store in meta.store_names
    ]


# ------------------------------------------------------------------------------------------------
# Before the rewrite, and taking the rewrite back


@dataclass(frozen=True)
class Before:
    """The files of the logs, of each operator's metadata and schema folders, and of every state
    partition folder before the rewrite, folder by folder: JSON lines `{"folder": ..., "files":
    [[name, size], ...]}`. The metadata folders are there because a repartition writes operator
    metadata v2 and schema files for its batch (transformWithState): an undo takes them back too.
    A record made before they were listed undoes what it lists."""

    lines: list[str]

    @staticmethod
    def folders_of(storage: Storage) -> list[str]:
        operators = sorted({f.rsplit("/", 1)[0] for f in state_partition_folders(storage)})
        metadata = [f"{op}/{sub}" for op in operators for sub in _OPERATOR_FOLDERS]
        return list(_LOG_FOLDERS) + metadata + state_partition_folders(storage)

    @staticmethod
    def take(storage: Storage) -> Before:
        return Before([_line(folder, storage.list_files(folder)) for folder in Before.folders_of(storage)])

    def data(self) -> bytes:
        return "".join(line + "\n" for line in self.lines).encode()

    @staticmethod
    def parse(data: bytes, where: str) -> Before:
        try:
            lines = [line for line in data.decode().splitlines() if line.strip()]
            for line in lines:
                row = json.loads(line)
                if not isinstance(row["folder"], str) or not isinstance(row["files"], list):
                    raise TypeError("bad row")
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"unreadable record of the files before a repartition: {exc}", where
            ) from exc
        return Before(lines)

    def folders(self) -> Iterator[tuple[str, dict[str, int]]]:
        for line in self.lines:
            row = json.loads(line)
            yield row["folder"], {name: size for name, size in row["files"]}


def _line(folder: str, files: list[FileInfo]) -> str:
    return json.dumps({"folder": folder, "files": [[f.rel, f.size] for f in files]})


def added_since(storage: Storage, before: Before) -> list[str]:
    """The files that are not in `before`: what a repartition wrote. Raises when a file of
    `before` is gone or changed size, which no repartition does: then nothing may be deleted."""
    added: list[str] = []
    known = set()
    for folder, files in before.folders():
        known.add(folder)
        now = {f.rel: f.size for f in storage.list_files(folder)}
        changed = [rel for rel, size in files.items() if now.get(rel) != size]
        if changed:
            raise CheckpointError(
                f"{changed[0]} is gone or changed since the repartition began ({len(changed)} such files): "
                "the checkpoint was changed by something else; nothing is undone (the backup fork has it)",
                storage.url,
            )
        added += sorted(set(now) - set(files))
    for folder in state_partition_folders(storage):
        if folder not in known:  # a partition folder the repartition created
            added += [f.rel for f in storage.list_files(folder)]
    return added


def undo(storage: Storage, before: Before) -> list[str]:
    """Deletes what the repartition added: state files, then the commit, then the offsets; returns
    what was deleted. Killed part-way, the checkpoint still names the batch, so a restarted query
    fails on the missing state instead of running half a repartition, and the next undo, which
    compares with `before` again, finishes the job."""
    added = added_since(storage, before)
    state = sorted(r for r in added if r.startswith("state/"))
    logs = sorted(
        (r for r in added if not r.startswith("state/")), key=lambda r: (r.startswith("offsets/"), r)
    )
    for group in (state, logs):
        for start in range(0, len(group), DELETE_MAX_KEYS):
            errors = storage.delete_batch(group[start : start + DELETE_MAX_KEYS])
            if errors:
                rel, why = next(iter(errors.items()))
                raise CheckpointError(f"undo could not delete {rel}: {why} ({len(errors)} files left)",
                                      storage.url)  # fmt: skip
    storage.remove_empty_folders(sorted({r.rsplit("/", 1)[0] for r in state}))
    return state + logs


# ------------------------------------------------------------------------------------------------
# The head-first profile: what each partition holds, from file sizes and zip metadata


def head_profile(ckpt: Checkpoint) -> dict[str, Any]:
    """Per operator and partition: the bytes recovery reads and the keys of the newest snapshot
    (zip metadata: keys as of that version), with skew (max / mean) and the largest partitions.
    `ckpt` is a head-first load at the latest batch; nothing is read but zip metadata."""
    batch = ckpt.latest_committed_batch
    if batch is None:
        raise RepartitionRefused("no committed batch: nothing to profile", ckpt.url)
    operators = []
    for op, meta in sorted(ckpt.operators.items()):
        parts: dict[int, dict[str, Any]] = {}
        for sid, store in ckpt.stores.items():
            if sid.operator != op:
                continue
            entry = parts.setdefault(sid.partition, {"partition": sid.partition, "bytes": 0, "keys": 0,
                                                     "keys_as_of": None})  # fmt: skip
            entry["bytes"] += sum(f.info.size for f in store.files)
            zips = [f for f in store.files if f.kind.lists_files]
            if zips:
                newest = max(zips, key=lambda f: f.what.version_id)
                entry["keys"] += ckpt.read_snapshot(newest).metadata.num_keys
                entry["keys_as_of"] = max(entry["keys_as_of"] or 0, newest.what.version_id)
        rows = [parts[p] for p in sorted(parts)]
        largest = [r["partition"] for r in sorted(rows, key=lambda r: -r["bytes"])[:3]]
        spread = {what: skew([r[what] for r in rows]) for what in ("bytes", "keys")}
        operators.append(
            {"operator": op, "name": meta.name, "partitions": rows, "skew": spread, "largest": largest}
        )
    return {
        "checkpoint": ckpt.url,
        "batch": batch,
        "partitions": partition_count(ckpt, batch),
        "operators": operators,
    }


def skew(values: list[int]) -> float | None:
    """max / mean: 1.0 is even; None when there is nothing to spread."""
    total = sum(values)
    return None if not values or total == 0 else round(max(values) / (total / len(values)), 3)
