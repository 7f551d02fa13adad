"""Validation: the commit log, offset log and state files checked against each other.

Each finding has a stable code, a severity and the path concerned. By default validation reads what
recovery at the latest committed batch would read: commit and offset files, the committed changelog
headers (lineage), and the metadata of the zips in those lineages. `deep` also reads every file of
the replay chains whole: lz4/zstd block checksums, the `.crc` sidecars, and a zip without one
entry by entry against their CRC-32s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise

import humanfriendly

from checkpoint.analysis.chains import REFUSALS, chain_findings
from checkpoint.analysis.findings import CODES as CODES
from checkpoint.analysis.findings import Category as Category
from checkpoint.analysis.findings import Finding, FindingCode, batch_spans, spans_text, utc_minute
from checkpoint.analysis.findings import Severity as Severity
from checkpoint.analysis.findings import finding as _finding
from checkpoint.analysis.sources import source_findings
from checkpoint.analysis.stores import store_findings
from checkpoint.errors import (
    CheckpointError,
    UnknownFormatVersionError,
    read_failed,
)
from checkpoint.format import (
    FORK_COMPLETE,
    FORK_STARTED,
    SIDECAR_BYTES,
    ByEngine,
    Checksumming,
    FileKind,
    Snapshot,
    StateAction,
    UnreadableZipError,
    bound_of,
    parse_sidecar,
)
from checkpoint.model import Checkpoint, CheckpointFile, Logs, StoreLineage, checkpoint_lineage
from checkpoint.policy import POLICY
from checkpoint.storage import redact


@dataclass(frozen=True)
class ValidationOptions:
    deep: bool = False
    long_chain_threshold: int = POLICY.long_chain  # changelogs replayed; compaction's trigger too
    header_cap_ratio: float = POLICY.header_cap_ratio  # compaction's rescue trigger too
    # The clock that dormancy is told by (DORMANT, STOPPED_MID_BATCH): each entry point passes its
    # own, tests a manual one. None: not told, so a library caller's findings never depend on when
    # it ran, nor a test's on its corpus's age.
    now: float | None = None
    dormant_seconds: float = POLICY.dormant_seconds
    # What is checked; a cleanup's plan asks for the commit log's findings alone.
    categories: frozenset[Category] = frozenset(Category)


@dataclass(frozen=True)
class Validation:
    findings: tuple[Finding, ...]
    lineage: tuple[StoreLineage, ...]
    # The metadata version of every zip the snapshot checks read, by its path: the Spark that wrote
    # each (`analysis.readiness`), without a second read.
    snapshot_versions: Mapping[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(f.severity == Severity.ERROR for f in self.findings)

    def of(self, category: Category) -> list[Finding]:
        return [f for f in self.findings if f.category == category]


def validate(ckpt: Checkpoint, options: ValidationOptions = ValidationOptions()) -> Validation:
    """The findings of the options' categories for a checkpoint loaded with `strict=False`.

    The commit-log category reads nothing beyond the load; lineage and snapshot read changelog
    headers and zip metadata (and whole chain files when `deep`).
    """
    findings: list[Finding] = []
    categories = options.categories
    if Category.COMMIT_LOG in categories:
        findings += _fork_findings(ckpt)
        findings += _bare_operators(ckpt)
        findings += _file_problems(ckpt)
        findings += _log_findings(ckpt)
        findings += source_findings(ckpt)
        findings += _path_findings(ckpt)
        findings += _activity_findings(ckpt, options)
    lineage: list[StoreLineage] = []
    versions: dict[str, int] = {}
    if ckpt.operators and Category.LINEAGE in categories:
        offsets = ckpt.storage.full("offsets")
        unknown = ckpt.states.on_refusal(
            StateAction.READ, lambda why: _finding(FindingCode.UNKNOWN_PROVIDER, offsets, why)
        )
        if unknown is not None:
            return Validation((*findings, unknown), ())
    if categories & {Category.LINEAGE, Category.SNAPSHOT} and ckpt.latest_committed_batch is not None:
        lineage = checkpoint_lineage(ckpt)
        if Category.LINEAGE in categories:
            for entry in lineage:
                findings += chain_findings(
                    ckpt, entry, options.long_chain_threshold, options.header_cap_ratio
                )
        if Category.SNAPSHOT in categories:
            findings += _snapshot_findings(ckpt, lineage, versions)
            if options.deep:
                findings += _deep_findings(ckpt, lineage, versions)
    return Validation(tuple(findings), tuple(lineage), versions)


def validate_look(
    load: Callable[[Logs], Checkpoint], options: ValidationOptions = ValidationOptions()
) -> tuple[Checkpoint, Validation]:
    """A look's validation (the fleet's rows, `scan`): `load(Logs.RECOVERY)`, of the logs only what a
    restart reads. What the newest batches alone cannot tell is told from every retained log:
    an error (a damaged newest commit leaves the format to be guessed from nothing) and a folder
    no read batch names (an older batch may, before a repartition). Load and validation again,
    with `Logs.ALL`, then: those rows say what `validate` says."""
    ckpt = load(Logs.RECOVERY)
    validation = validate(ckpt, options)
    if any(f.severity == Severity.ERROR or f.code in _ACROSS_BATCHES for f in validation.findings):
        ckpt = load(Logs.ALL)
        validation = validate(ckpt, options)
    return ckpt, validation


_ACROSS_BATCHES = frozenset({FindingCode.UNNAMED_STATE_FOLDER})


def unfinished_batch(ckpt: Checkpoint) -> int | None:
    """The batch planned after the latest commit and never committed, if any."""
    planned, committed = ckpt.latest_planned_batch, ckpt.latest_committed_batch
    return planned if planned is not None and planned > (-1 if committed is None else committed) else None


def dormant_since(
    ckpt: Checkpoint, now: float, dormant_seconds: float = POLICY.dormant_seconds
) -> float | None:
    """When the checkpoint last planned or committed a batch, if that is the dormancy period ago or
    more; else None. Undated logs (no mtime) are never dormant."""
    last = ckpt.last_activity_mtime
    return last if last is not None and now - last >= dormant_seconds else None


def _activity_findings(ckpt: Checkpoint, options: ValidationOptions) -> Iterable[Finding]:
    if options.now is None:
        return
    since = dormant_since(ckpt, options.now, options.dormant_seconds)
    if since is None:
        return
    idle = humanfriendly.format_timespan(options.now - since, max_units=2)
    when = utc_minute(since)
    unfinished, committed = unfinished_batch(ckpt), ckpt.latest_committed_batch
    if unfinished is not None:
        yield _finding(FindingCode.STOPPED_MID_BATCH, ckpt.storage.full(f"offsets/{unfinished}"),
                       f"batch {unfinished} was planned and never committed; nothing since {when} "
                       f"({idle}): the query stopped mid-batch, and a restart replays it")  # fmt: skip
        return
    last, where = ("no commit", "commits") if committed is None else (f"last commit: batch {committed}",
                                                                      f"commits/{committed}")  # fmt: skip
    yield _finding(FindingCode.DORMANT, ckpt.storage.full(where),
                   f"dormant since {when} ({idle} without a commit or an offset; {last})")  # fmt: skip


def _fork_findings(ckpt: Checkpoint) -> Iterable[Finding]:
    markers = {f.rel for f in ckpt.files if f.kind == FileKind.FORK_MARKER}
    if FORK_STARTED in markers and FORK_COMPLETE not in markers:
        yield _finding(
            FindingCode.INCOMPLETE_FORK,
            ckpt.storage.full(FORK_STARTED),
            "this checkpoint is a fork (or a migration) that stopped part-way: run the same `ckpt fork` "
            "(or `ckpt migrate`) again to finish it before any query starts here",
        )


def _path_findings(ckpt: Checkpoint) -> Iterable[Finding]:
    """Every absolute path the checkpoint's own files name must lie inside it and exist: operator
    metadata v2 names its schema files so (`file:/...`, `s3a://...`), and Spark reads them at
    restart by that path. A checkpoint moved with `mv` or copied still names the old place, and
    Spark fails there with FileNotFoundException (then creates empty folders at the old place)."""
    here = ckpt.storage.url
    named: dict[str, str] = {}  # rel -> the operator metadata file that names it
    for op in ckpt.operators.values():
        if op.metadata is None:
            continue
        meta_path = f"state/{op.id}/_metadata"
        for store in op.metadata.stores:
            for path in store.schema_paths:
                root, sep, rel = path.partition("/state/")
                if not sep:
                    yield _finding(FindingCode.MOVED_CHECKPOINT, ckpt.storage.full(meta_path),
                                   f"operator {op.id} names the schema file {path}, which is no path in a "
                                   "checkpoint")  # fmt: skip
                    continue
                if not ckpt.storage.is_at(root):
                    yield _finding(
                        FindingCode.MOVED_CHECKPOINT,
                        ckpt.storage.full(meta_path),
                        f"operator {op.id} reads its state schema from {redact(path)}, under "
                        f"{redact(root)}, not under this checkpoint: it was moved or copied, and Spark "
                        f"cannot restart here. Run `ckpt fork {here} NEW` (the fork rewrites these paths) "
                        f"and start the query on NEW, or move it back to {redact(root)}",
                    )
                    continue
                named[f"state/{rel}"] = meta_path
    for rel, meta_path in sorted(named.items()):
        if ckpt.storage.stat(rel) is None:
            yield _finding(FindingCode.SCHEMA_FILE_MISSING, ckpt.storage.full(rel),
                           f"the state schema file that {meta_path} names does not exist: Spark cannot "
                           "restart the query")  # fmt: skip


def _bare_operators(ckpt: Checkpoint) -> Iterable[Finding]:
    """Every store and file this tool reads, keeps or writes is named from operator metadata.
    Without it an operator's state is invisible: a cleanup would take its files for orphans and a
    fork or migration would leave them out. Spark 4.x writes it on the query's first run."""
    named = {op for op, o in ckpt.operators.items() if o.metadata is not None}
    unreadable = {f.rel.split("/")[1] for f in ckpt.problems if f.rel.startswith("state/")}
    for op in sorted(ckpt.operator_folders - named):
        if str(op) in unreadable:
            continue  # reported as an unreadable file
        where = ckpt.storage.full(f"state/{op}/_metadata/metadata")
        yield _finding(FindingCode.OPERATOR_METADATA_MISSING, where,
                       f"operator {op} has state and no operator metadata (a checkpoint last run before "
                       "Spark 4.0?): its stores cannot be named, so no action touches this checkpoint; run "
                       "the query once on Spark 4.x, which writes it")  # fmt: skip


_PROBLEM_CODES = ((UnknownFormatVersionError, FindingCode.UNKNOWN_FORMAT_VERSION), *REFUSALS)


def _file_problems(ckpt: Checkpoint) -> Iterable[Finding]:
    for problem in ckpt.problems:
        codes = (code for kind, code in _PROBLEM_CODES if isinstance(problem.error, kind))
        yield _finding(
            next(codes, FindingCode.UNREADABLE_LOG_FILE), ckpt.storage.full(problem.rel), str(problem.error)
        )
    # By the listed size, before any read: the log files' own bound is their parse's (above).
    for f in ckpt.files:
        bound = bound_of(f.kind)
        if bound is not None and f.info.size > bound and f.kind not in _PARSED_LOGS:
            yield _finding(FindingCode.FILE_OVER_ITS_BOUND, ckpt.storage.full(f.rel),
                           f"{f.info.size} bytes, where Spark writes at most {bound} in a file of its kind "
                           f"({f.kind.value}): not read")  # fmt: skip


_PARSED_LOGS = (FileKind.QUERY_METADATA, FileKind.OFFSET, FileKind.COMMIT, FileKind.OPERATOR_METADATA)


Span = tuple[int, int]  # first and last batch id of a run, both included


def _missing_spans(ids: set[int]) -> list[Span]:
    """The runs of ids missing between the smallest and the largest: as many as there are gaps,
    whatever their length (a stray `commits/9223372036854775806` is one span, not a set of 10^18)."""
    return [(a + 1, b - 1) for a, b in pairwise(sorted(ids)) if b > a + 1]


def _log_findings(ckpt: Checkpoint) -> Iterable[Finding]:
    full = ckpt.storage.full
    # From the listing, not the parsed entries: an unreadable file is its own finding, not a gap.
    offsets = {f.what.batch_id for f in ckpt.files if f.kind == FileKind.OFFSET}
    commits = {f.what.batch_id for f in ckpt.files if f.kind == FileKind.COMMIT}
    # An interrupted fork has no `metadata` yet (INCOMPLETE_FORK says so, and what to do).
    named = (FileKind.QUERY_METADATA, FileKind.FORK_MARKER)
    if (offsets or commits) and not any(f.kind in named for f in ckpt.files):
        # Seen in restarts: 4.3.0 fails with STREAMING_CHECKPOINT_MISSING_METADATA_FILE; 4.0.5 and
        # 4.1.4 write a new `metadata`, and the query goes on under another id.
        yield _finding(
            FindingCode.QUERY_METADATA_MISSING,
            full("metadata"),
            "no `metadata` file (the query's id), while the logs hold batches: Spark 4.3.0 refuses to "
            "start the query here, and 4.0.5 and 4.1.4 start it as a new query, under a new id; "
            "restore it from a backup or an older fork",
        )
    offset_gaps = _missing_spans(offsets)
    if offset_gaps:
        yield _finding(
            FindingCode.OFFSET_LOG_GAP,
            full("offsets"),
            f"offsets missing for batches {spans_text(offset_gaps)}",
        )
    # A commit without offsets strictly between the first and the last offset is inside a gap,
    # which is its finding already.
    first, last = min(offsets, default=0), max(offsets, default=-1)
    for b in sorted(b for b in commits - offsets if not first < b < last):
        yield _finding(
            FindingCode.COMMIT_WITHOUT_OFFSETS,
            full(f"commits/{b}"),
            f"batch {b} is committed but offsets/{b} is missing",
        )
    latest = max(commits, default=None)
    if latest is not None:
        unfinished_below = sorted(b for b in offsets - commits if b < latest)
        if unfinished_below:
            yield _finding(
                FindingCode.COMMIT_LOG_GAP,
                full("commits"),
                f"batches {batch_spans(set(unfinished_below))} are planned but not committed, "
                f"below committed batch {latest}",
            )
    pending = sorted(b for b in offsets - commits if latest is None or b > latest)
    if len(pending) > 1:
        yield _finding(
            FindingCode.MULTIPLE_UNFINISHED_BATCHES,
            full("offsets"),
            f"{len(pending)} planned batches after the latest commit ({batch_spans(set(pending))}); "
            "Spark leaves at most one",
        )
    yield from _partition_findings(ckpt, latest)


def _partition_findings(ckpt: Checkpoint, latest: int | None) -> Iterable[Finding]:
    if latest is None or latest not in ckpt.batches:
        return  # the newest commit file could not be read: a finding of its own says so
    yield from store_findings(ckpt, latest)
    batch = ckpt.batches[latest]
    if batch.commit is None or batch.commit.state_unique_ids is None or batch.offset is None:
        return
    expected = batch.offset.shuffle_partitions
    for op, partitions in sorted(batch.commit.state_unique_ids.items()):
        if expected is not None and len(partitions) != expected:
            yield _finding(
                FindingCode.PARTITION_COUNT_MISMATCH,
                ckpt.storage.full(f"commits/{latest}"),
                f"operator {op} has {len(partitions)} partitions in the commit log but "
                f"spark.sql.shuffle.partitions is {expected} in offsets/{latest}",
            )


def _snapshot_findings(
    ckpt: Checkpoint, lineage: list[StoreLineage], versions: dict[str, int]
) -> Iterable[Finding]:
    """RocksDB's zips are checked here. Every other file the loads read is read whole by recovery:
    here only an empty one is told (what the listing says); `deep` reads them."""
    yield from ckpt.states.engine.of(_ZIPS)(ckpt, lineage, versions)
    yield from _empty_state_files(ckpt, lineage)


def _loadable_zips(
    ckpt: Checkpoint, lineage: list[StoreLineage], versions: dict[str, int]
) -> Iterable[Finding]:
    """Every zip Spark could load for the latest batch: each one the committed lineages name."""
    checked: set[str] = set()
    for entry in lineage:
        store = ckpt.stores.get(entry.store)
        if store is None:
            continue
        candidates: list[CheckpointFile | None] = [entry.base] if entry.base else []
        if entry.header and entry.header.lineage:
            candidates += [store.file(FileKind.ZIP, e.version, e.unique_id) for e in entry.header.lineage]
        ssts = {f.rel.rsplit("/", 1)[1]: f for f in store.ssts}
        for zf in candidates:
            if zf is None or zf.rel in checked:
                continue
            checked.add(zf.rel)
            yield from _zip_findings(ckpt, zf, ssts, versions)


def _empty_state_files(ckpt: Checkpoint, lineage: list[StoreLineage]) -> Iterable[Finding]:
    """Spark writes no state file empty, and fails to load a store on one (an EOFException for a
    changelog of either format, seen in restarts): the listing tells it, with no read. An empty zip
    is the zip check's."""
    for entry in lineage:
        for f in ([entry.base] if entry.base else []) + list(entry.chain):
            if f.info.size == 0 and f.kind in _CORRUPT:
                why = f"an empty file: Spark cannot read version {f.what.version} of the store"
                yield _finding(_CORRUPT[f.kind], ckpt.storage.full(f.rel), why)


def _no_zips(ckpt: Checkpoint, lineage: list[StoreLineage], versions: dict[str, int]) -> Iterable[Finding]:
    return ()


# A zip is checked here because RocksDB's recovery opens it and reads its metadata first.
_ZIPS = ByEngine(hdfs=_no_zips, rocksdb=_loadable_zips)


# What a state file's records give when they do not decode (an empty file's too), by its kind.
_CORRUPT = {
    FileKind.CHANGELOG: FindingCode.CHANGELOG_CORRUPT,
    FileKind.SNAPSHOT: FindingCode.SNAPSHOT_UNREADABLE,
    FileKind.DELTA: FindingCode.DELTA_UNREADABLE,
}


def _unless_storage_failed(exc: CheckpointError) -> None:
    """Raises a failed read (a file gone since its listing, a GET refused or cut): the storage's
    failure, not the bytes'. A finding would call the file corrupt. What the door refuses to read
    (a link, a FIFO, a file past its kind's bound) is a finding of the file."""
    if read_failed(exc):
        raise exc


def _zip_findings(
    ckpt: Checkpoint, zf: CheckpointFile, ssts: dict[str, CheckpointFile], versions: dict[str, int]
) -> Iterable[Finding]:
    path = ckpt.storage.full(zf.rel)
    try:
        snap: Snapshot = ckpt.read_snapshot(zf)
    except UnknownFormatVersionError as exc:
        yield _finding(FindingCode.UNKNOWN_FORMAT_VERSION, path, str(exc), Category.SNAPSHOT)
        return
    except UnreadableZipError as exc:
        yield _finding(FindingCode.ZIP_UNREADABLE, path, str(exc))
        return
    except CheckpointError as exc:
        _unless_storage_failed(exc)
        yield _finding(FindingCode.ZIP_METADATA_INVALID, path, str(exc))
        return
    versions[zf.rel] = snap.metadata.version
    folder = zf.rel.rsplit("/", 1)[0]
    for ref in snap.metadata.sst_files:
        found = ssts.get(ref.dfs_name)
        sst_path = ckpt.storage.full(f"{folder}/SSTs/{ref.dfs_name}")
        if found is None:
            yield _finding(
                FindingCode.SST_MISSING, sst_path, f"listed by {zf.rel.rsplit('/', 1)[1]} but missing"
            )
        elif found.info.size != ref.size:
            yield _finding(
                FindingCode.SST_SIZE_MISMATCH,
                sst_path,
                f"{found.info.size} bytes, but {zf.rel.rsplit('/', 1)[1]} lists {ref.size}",
            )


def _undecoded(code: FindingCode, path: str, check: Callable[[], object]) -> Iterable[Finding]:
    try:
        check()
    except CheckpointError as exc:
        _unless_storage_failed(exc)
        yield _finding(code, path, str(exc))


def _deep_findings(
    ckpt: Checkpoint, lineage: list[StoreLineage], zips_read: dict[str, int]
) -> Iterable[Finding]:
    sidecars = {f.what.main: f for f in ckpt.files if f.kind == FileKind.SPARK_CRC}
    seen: set[str] = set()
    for entry in lineage:
        for f in ([entry.base] if entry.base else []) + list(entry.chain):
            if f.rel in seen or (f.info.size == 0 and f.kind in _CORRUPT):  # an empty one is told already
                continue
            seen.add(f.rel)
            path, crc = ckpt.storage.full(f.rel), sidecars.get(f.rel)
            if f.kind.lists_files and crc is None:
                # No sidecar (format V1, or Spark's checksums off): the entries' CRC-32s tell a
                # flipped byte, as RocksDB's load unpacks the zip. One whose metadata did not read
                # is reported already.
                if f.rel in zips_read:
                    yield from _undecoded(
                        FindingCode.ZIP_UNREADABLE, path, functools.partial(ckpt.check_zip, f)
                    )
                continue
            # One pass over the file, a chunk at a time: the decoder pulls the bytes and the CRC32C
            # is taken on the way; the records are checked as they pass, none is kept.
            with ckpt.storage.open(f.rel, block_size=POLICY.copy_chunk_bytes, size=f.info.size) as fh:
                tee = Checksumming(fh.read)
                code = _CORRUPT.get(f.kind)
                if code is not None:
                    yield from _undecoded(code, path, functools.partial(ckpt.count_records, f, tee.read))
                tee.drain(POLICY.copy_chunk_bytes)
            if crc is not None and crc.info.size <= SIDECAR_BYTES:  # else FILE_OVER_ITS_BOUND, unread
                try:
                    matches = tee.agrees(
                        parse_sidecar(
                            ckpt.storage.read_bytes(crc.rel, limit=SIDECAR_BYTES), ckpt.storage.full(crc.rel)
                        )  # fmt: skip
                    )
                except CheckpointError as exc:
                    yield _finding(FindingCode.CRC_MISMATCH, ckpt.storage.full(crc.rel), str(exc))
                    continue
                if not matches:
                    yield _finding(
                        FindingCode.CRC_MISMATCH,
                        path,
                        f"the bytes do not match {crc.rel.rsplit('/', 1)[1]}: Spark will refuse to load it",
                    )
