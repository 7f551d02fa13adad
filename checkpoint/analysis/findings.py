"""What validation reports: every finding's code, severity and category, and the finding itself.
The checks live in `validate` (and `stores`); a document, a test and the UI read the codes here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum, StrEnum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Category(str, Enum):
    """Which blocking check a finding belongs to."""

    COMMIT_LOG = "commit_log"
    LINEAGE = "lineage"
    SNAPSHOT = "snapshot"


class FindingCode(StrEnum):
    """Every finding validation reports (`CODES` says what each means). A StrEnum: a code compares,
    hashes, prints and serialises as its name, so documents and tests read plain strings."""

    INCOMPLETE_FORK = "INCOMPLETE_FORK"
    QUERY_METADATA_MISSING = "QUERY_METADATA_MISSING"
    MOVED_CHECKPOINT = "MOVED_CHECKPOINT"
    SCHEMA_FILE_MISSING = "SCHEMA_FILE_MISSING"
    UNREADABLE_LOG_FILE = "UNREADABLE_LOG_FILE"
    UNKNOWN_FORMAT_VERSION = "UNKNOWN_FORMAT_VERSION"
    COMMIT_WITHOUT_OFFSETS = "COMMIT_WITHOUT_OFFSETS"
    OFFSET_LOG_GAP = "OFFSET_LOG_GAP"
    COMMIT_LOG_GAP = "COMMIT_LOG_GAP"
    MULTIPLE_UNFINISHED_BATCHES = "MULTIPLE_UNFINISHED_BATCHES"
    SOURCE_LOG_MISSING = "SOURCE_LOG_MISSING"
    PARTITION_COUNT_MISMATCH = "PARTITION_COUNT_MISMATCH"
    COMMITTED_FILE_MISSING = "COMMITTED_FILE_MISSING"
    CHANGELOG_UNREADABLE = "CHANGELOG_UNREADABLE"
    CHANGELOG_BESIDE_ZIP_DAMAGED = "CHANGELOG_BESIDE_ZIP_DAMAGED"
    LINEAGE_NOT_CONTIGUOUS = "LINEAGE_NOT_CONTIGUOUS"
    LINEAGE_BAD_END = "LINEAGE_BAD_END"
    REPLAY_CHAIN_BROKEN = "REPLAY_CHAIN_BROKEN"
    REPLAY_CHAIN_NO_BASE = "REPLAY_CHAIN_NO_BASE"
    LINEAGE_HEADER_NEAR_CAP = "LINEAGE_HEADER_NEAR_CAP"
    LONG_REPLAY_CHAIN = "LONG_REPLAY_CHAIN"
    ZIP_UNREADABLE = "ZIP_UNREADABLE"
    ZIP_METADATA_INVALID = "ZIP_METADATA_INVALID"
    SST_MISSING = "SST_MISSING"
    SST_SIZE_MISMATCH = "SST_SIZE_MISMATCH"
    CRC_MISMATCH = "CRC_MISMATCH"
    CHANGELOG_CORRUPT = "CHANGELOG_CORRUPT"
    SNAPSHOT_UNREADABLE = "SNAPSHOT_UNREADABLE"
    DELTA_UNREADABLE = "DELTA_UNREADABLE"
    UNKNOWN_PROVIDER = "UNKNOWN_PROVIDER"
    OPERATOR_METADATA_MISSING = "OPERATOR_METADATA_MISSING"
    STORES_DISAGREE = "STORES_DISAGREE"
    UNNAMED_STATE_FOLDER = "UNNAMED_STATE_FOLDER"
    FILE_OUTSIDE_CHECKPOINT = "FILE_OUTSIDE_CHECKPOINT"
    NOT_A_REGULAR_FILE = "NOT_A_REGULAR_FILE"
    FILE_OVER_ITS_BOUND = "FILE_OVER_ITS_BOUND"
    DORMANT = "DORMANT"
    STOPPED_MID_BATCH = "STOPPED_MID_BATCH"


@dataclass(frozen=True)
class Code:
    name: FindingCode
    severity: Severity
    category: Category
    summary: str


def _codes(*codes: Code) -> dict[str, Code]:
    return {c.name: c for c in codes}


E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
LOG, LIN, SNAP = Category.COMMIT_LOG, Category.LINEAGE, Category.SNAPSHOT
F = FindingCode
# fmt: off
CODES = _codes(
    Code(F.INCOMPLETE_FORK, E, LOG, "an interrupted fork: a query started here would lose state"),
    Code(F.QUERY_METADATA_MISSING, E, LOG, "the checkpoint's `metadata` file (the query's id) is missing "
         "while its logs hold batches: Spark 4.3.0 refuses to start the query, 4.0.5 and 4.1.4 start it "
         "under a new id"),
    Code(F.OPERATOR_METADATA_MISSING, E, LOG, "an operator's state folder has no operator metadata: its "
         "stores cannot be named (written before Spark 4.0)"),
    Code(F.MOVED_CHECKPOINT, E, LOG, "operator metadata names schema files under another root: moved"),
    Code(F.SCHEMA_FILE_MISSING, E, LOG, "a schema file that operator metadata names does not exist"),
    Code(F.UNREADABLE_LOG_FILE, E, LOG, "a commit, offset or metadata file cannot be parsed"),
    Code(F.FILE_OUTSIDE_CHECKPOINT, E, LOG, "a file of the checkpoint resolves outside it (a symlink in its "
         "name or a folder above): never read, and every action that writes refuses the checkpoint"),
    Code(F.NOT_A_REGULAR_FILE, E, LOG, "a FIFO, a device or a socket where Spark writes a file: never "
         "opened, and every action that writes refuses the checkpoint"),
    Code(F.FILE_OVER_ITS_BOUND, E, LOG, "a file is larger than any Spark writes of its kind (a .crc sidecar "
         "over 4 KiB, a schema file over 16 MiB): never read, and every action refuses the checkpoint"),
    Code(F.UNKNOWN_FORMAT_VERSION, E, LOG, "a file declares a format version this release does not know"),
    Code(F.COMMIT_WITHOUT_OFFSETS, E, LOG, "a batch is committed but its offsets file is missing"),
    Code(F.OFFSET_LOG_GAP, E, LOG, "batch ids missing inside the offset log"),
    Code(F.COMMIT_LOG_GAP, E, LOG, "a planned batch below the latest committed one has no commit"),
    Code(F.MULTIPLE_UNFINISHED_BATCHES, E, LOG, "more than one planned batch after the latest commit"),
    Code(F.SOURCE_LOG_MISSING, E, LOG, "a file source's log has no readable entry (missing, empty or "
         "misnamed) where a restart reads one, from its newest compaction to the newest offsets' "
         "logOffset: Spark fails to start the query"),
    Code(F.PARTITION_COUNT_MISMATCH, E, LOG, "state partitions in the commit log differ from the offsets"),
    Code(F.STORES_DISAGREE, E, LOG, "what names the stores disagrees: the operator metadata's partitions and "
         "stores, the offsets' spark.sql.shuffle.partitions, the commit's ids and the state folders"),
    Code(F.DORMANT, INFO, LOG, "no commit and no offset for the dormancy period (7 days by default): the "
         "query is stopped or gone; the other findings still show"),
    Code(F.STOPPED_MID_BATCH, INFO, LOG, "the newest batch was planned and never committed, and nothing "
         "since for the dormancy period: the query stopped mid-batch (a restart replays that batch)"),
    Code(F.UNNAMED_STATE_FOLDER, W, LOG, "a partition folder that no batch in the logs names: kept, never "
         "cleaned"),
    Code(F.COMMITTED_FILE_MISSING, E, LIN, "the committed version of a store has no state file (changelog or "
         "zip; delta or snapshot for the HDFS-backed store)"),
    Code(F.CHANGELOG_UNREADABLE, E, LIN, "the committed changelog's header cannot be read, and its version "
         "has no zip"),
    Code(F.CHANGELOG_BESIDE_ZIP_DAMAGED, W, LIN, "the committed version has its zip, and its changelog's "
         "header cannot be read or names a wrong lineage: recovery loads the zip and reads none of it"),
    Code(F.LINEAGE_NOT_CONTIGUOUS, E, LIN, "a changelog's lineage skips or repeats versions"),
    Code(F.LINEAGE_BAD_END, E, LIN, "a changelog's lineage does not end at version - 1"),
    Code(F.REPLAY_CHAIN_BROKEN, E, LIN, "a changelog (or delta) the replay chain needs is missing"),
    Code(F.REPLAY_CHAIN_NO_BASE, E, LIN, "no zip in the lineage and the lineage does not start at version 1"),
    Code(F.LINEAGE_HEADER_NEAR_CAP, E, LIN, "the lineage header is near the 65,535-byte cap"),
    Code(F.LONG_REPLAY_CHAIN, W, LIN, "recovery replays a long chain of changelogs (or deltas)"),
    Code(F.ZIP_UNREADABLE, E, SNAP, "a snapshot zip cannot be opened or holds what Spark cannot unpack"),
    Code(F.ZIP_METADATA_INVALID, E, SNAP, "a snapshot zip's metadata is invalid"),
    Code(F.SST_MISSING, E, SNAP, "an SST a snapshot lists does not exist"),
    Code(F.SST_SIZE_MISMATCH, E, SNAP, "an SST a snapshot lists has another size"),
    Code(F.CRC_MISMATCH, E, SNAP, "a file does not match its .crc sidecar (deep)"),
    Code(F.CHANGELOG_CORRUPT, E, SNAP, "a changelog the replay chain needs is empty, or fails to decompress "
         "or parse (deep)"),
    Code(F.SNAPSHOT_UNREADABLE, E, SNAP, "an HDFS-backed store's snapshot is empty, or fails to "
         "decompress or parse (deep)"),
    Code(F.DELTA_UNREADABLE, E, SNAP, "a delta the replay chain needs is empty, or fails to decompress or "
         "parse (deep)"),
    Code(F.UNKNOWN_PROVIDER, E, LIN, "the state store provider is not Spark's: its state files are neither "
         "read nor changed"),
)
# fmt: on


@dataclass(frozen=True)
class Finding:
    code: FindingCode
    severity: Severity
    path: str
    message: str
    category: Category  # the check it belongs to: a code's own, or where an unknown version turned up

    def as_dict(self) -> dict:
        return {
            "severity": self.severity.value,
            "code": self.code,
            "path": self.path,
            "message": self.message,
        }


def finding(code: FindingCode, path: str, message: str, category: Category | None = None) -> Finding:
    return Finding(code, CODES[code].severity, path, message, category or CODES[code].category)


def batch_spans(ids: set[int]) -> str:
    """`0-11, 14`: ids as runs, so a gap shows."""
    ordered, runs = sorted(ids), []
    start = prev = ordered[0]
    for n in ordered[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        runs.append((start, prev))
        if n is not None:
            start = prev = n
    return spans_text(runs)


def spans_text(spans: Iterable[tuple[int, int]]) -> str:
    """`0-11, 14`: runs given as (first, last), however far apart (a forged id names any batch)."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def utc_minute(t: float) -> str:
    """A time as every view prints it: `2026-11-28 11:25 UTC`."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
