"""The rehearsal's scratch checkpoint: a fork at batch N-1 with batch N planned and not committed,
so that a query started there replays N from its recorded offsets, as a restart after a crash
does, with every check Spark makes at a restart."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from checkpoint.errors import CheckpointError, RehearsalRefused, UnknownFormatVersionError
from checkpoint.fork import ForkOptions, ForkResult, fork_checkpoint, source_logs
from checkpoint.format import (
    LINEAGE_HEADER_CAP,
    LOG_BYTES,
    MAINT_TEMP_PREFIX,
    RAW_FAMILIES,
    ByEngine,
    OffsetEntry,
    classify,
    file_source_paths,
)
from checkpoint.model import Checkpoint, checkpoint_lineage, load_head
from checkpoint.policy import POLICY
from checkpoint.repartition import state_readers
from checkpoint.safety import TwoSided, held_by
from checkpoint.storage import FileInfo

log = logging.getLogger(__name__)

# Spark's state reader decodes RocksDB's column families only when asked to read them raw; the
# HDFS-backed store has none.
_READER_OPTIONS: ByEngine[dict[str, str]] = ByEngine(hdfs={}, rocksdb=dict(RAW_FAMILIES))


def _reader_options(head: Checkpoint) -> dict[str, str]:
    shared = head.states.engine.of(_READER_OPTIONS)
    return dict(shared)  # a copy: the pair's dicts are every scratch's


@dataclass(frozen=True)
class Scratch:
    """What the rehearsal replays: batch N of `source`, planned in `url`."""

    source: str
    batch: int
    pinned: dict[str, str]  # the confs batch N's offsets pin, which Spark applies over the session's
    stores: tuple[tuple[int, str], ...]  # (operator, store name), as the operator metadata names them
    # The state data source's options for its stores: every column family's raw rows where the
    # format's state is RocksDB's; as the user reads them where it is the HDFS-backed store's.
    reader_options: dict[str, str]
    format_version: int  # the checkpoint format version its state is read with
    fork: ForkResult
    planned_files: int  # N's offsets and source logs, added to the fork
    inputs: tuple[str, ...]  # the files file sources read in batch N, as their logs name them (data)
    # What recovery after batch N reads in the checkpoint itself: its longest chain and its fullest
    # lineage header, of the cap.
    chain_after: int = 0
    header_fraction_after: float = 0.0


def scratch_fork(
    request: TwoSided, batch: int | None = None, *, workers: int = POLICY.fork_workers
) -> Scratch:
    """Forks `request.src` at N-1 into `request.dest` and adds N's offsets and source logs. Both
    leases are held while it copies, and only then: Spark then runs on the scratch alone."""
    with request.held("rehearsal") as check:
        src = request.src
        head = load_head(src, strict=False, batches=None if batch is None else [batch])
        committed = sorted(b.id for b in head.batches.values() if b.committed)
        n = batch if batch is not None else (committed[-1] if committed else None)
        if n is None or n not in committed:
            raise RehearsalRefused(f"batch {n} is not a committed batch: there is nothing to replay", src.url)
        if n < 1:
            raise RehearsalRefused("batch 0 has no state before it: rehearse batch 1 or later", src.url)
        entry = head.batches[n].offset
        if entry is None:
            raise RehearsalRefused(f"batch {n} has a commit and no offset file: nothing says what to replay",
                                   src.url)  # fmt: skip
        inner = TwoSided(src, request.dest, held_by(check))
        forked = fork_checkpoint(inner, ForkOptions(batch=n - 1, workers=workers, what="rehearsal"))
        added, read = _batch_logs(head, n, source_logs(src, n))
        planned = [f"offsets/{n}", *(f.rel for f in added)]
        check()
        request.dest.write(planned[0], src.read_bytes(planned[0], limit=LOG_BYTES))
        inputs: list[str] = []
        for at, f in read:  # a compaction lists every file ever read: its lines one at a time
            with src.open(f.rel, block_size=1 << 20, size=f.size) as fh:
                inputs += _inputs(at, fh.read, src.full(f.rel))
        for f in added:
            check()
            src.copy_to(f.rel, request.dest, f.rel, f.size, MAINT_TEMP_PREFIX)
        log.info("%s: scratch fork at batch %d with batch %d planned (%d files)", request.dest.url, n - 1, n,
                 forked.files + len(planned))  # fmt: skip
    after = checkpoint_lineage(head, n)
    return Scratch(
        chain_after=max((e.chain_length for e in after), default=0),
        header_fraction_after=round(
            max((e.lineage_header_bytes / LINEAGE_HEADER_CAP for e in after), default=0.0), 4
        ),
        source=src.url,
        batch=n,
        pinned=dict(entry.conf),
        stores=tuple((r.operator, r.store) for r in state_readers(head)),
        reader_options=_reader_options(head),
        format_version=head.format_version,
        fork=forked,
        planned_files=len(planned),
        inputs=tuple(inputs),
    )


def _batch_logs(
    head: Checkpoint, n: int, logs: list[FileInfo]
) -> tuple[list[FileInfo], list[tuple[int, FileInfo]]]:
    """Of the sources' log files up to entry `n` (`logs`): those the fork at N-1 lacks and batch N's
    replay reads, and (entry, file) of each entry whose files batch N read. A file source's log
    counts its own entries, not batches: batch N read the entries after batch N-1's `logOffset`
    up to its own, which stay behind N once a batch found no new file (a no-data batch). Another
    source's log (Kafka's initial offsets) gives its entry N, if any, as before."""
    folders = {f.rel.split("/")[1] for f in logs}

    def by_folder(offsets: OffsetEntry | None) -> dict[str, int]:
        # A line whose folder is not known (a source read twice) names no input here: Spark's
        # replay reads it, and says what it lacks. By folder, not line: v2 lines name theirs.
        if offsets is None:
            return {}
        return {folder: b for line, b in offsets.file_sources
                if (folder := offsets.source_folder(line, folders)) is not None}  # fmt: skip

    prior = head.batches.get(n - 1)
    before, now = by_folder(prior.offset if prior else None), by_folder(head.batches[n].offset)
    spans = {f"sources/{folder}": (before.get(folder, -1), b) for folder, b in now.items()}
    added, read = [], []
    for f in logs:
        entry, span = classify(f.rel).batch, spans.get(f.rel.rsplit("/", 1)[0])
        if entry is None:
            continue
        first, last = span if span is not None else (n - 1, n)
        if first < entry <= last:
            read += [(entry, f)] if span is not None else []
            added += [f] if entry == n else []  # the fork holds every entry up to N-1
    return added, read


def _inputs(batch: int, read: Callable[[int], bytes], path: str) -> list[str]:
    """The files a file source's log names for `batch` (none for another source's: Kafka's names
    offsets); a log Spark could not have written (not text, a line of megabytes) is refused."""
    try:
        return file_source_paths(batch, read, path)
    except UnknownFormatVersionError:  # another source's log: Spark says at the replay what it lacks
        return []
    except CheckpointError as exc:
        raise RehearsalRefused(f"the source log is not one Spark reads ({exc}): nothing to replay") from exc
