"""Where things live in a checkpoint: every relative path classified, state file names parsed.

Pure functions over relative paths; nothing here touches storage. A path that matches no rule is
UNKNOWN, and unknown files are never ours to change.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from enum import Enum


class FileKind(str, Enum):
    QUERY_METADATA = "query_metadata"
    OFFSET = "offset"
    COMMIT = "commit"
    SOURCE_LOG = "source_log"
    OPERATOR_METADATA = "operator_metadata"
    STATE_SCHEMA = "state_schema"
    CHANGELOG = "changelog"
    ZIP = "zip"
    SST = "sst"
    WAL_LOG = "wal_log"
    SPARK_CRC = "spark_crc"
    MAINT_TEMP = "maint_temp"  # this tool's own temp file while publishing a snapshot
    FORK_MARKER = "fork_marker"  # this tool's record of a fork in progress, and its completion
    HADOOP_CRC = "hadoop_crc"
    UNKNOWN = "unknown"


UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# checkpoint-format.md §1: `<version>[_<uuid>].(zip|changelog)`; the version is batch id + 1.
STATE_FILE = re.compile(rf"^(\d+)(?:_({UUID}))?\.(zip|changelog)$")
SST_FILE = re.compile(rf"^\d+-{UUID}\.sst$")
WAL_FILE = re.compile(rf"^\d+-{UUID}\.log$")
BATCH_FILE = re.compile(r"^\d+$")
SCHEMA_FILE = re.compile(rf"^\d+_{UUID}$")
SOURCE_LOG_FILE = re.compile(r"^\d+(?:\.compact)?$")

# This tool's temp files while it publishes a snapshot: recognised, so a crash leaves a known orphan.
MAINT_TEMP_PREFIX = ".ckpt-maint-"

# A fork writes the first into its destination before anything else and the second after
# everything else: the first without the second is an interrupted fork, which no query may start on.
FORK_STARTED = "_ckpt_fork.json"
FORK_COMPLETE = "_ckpt_fork.complete.json"

# Folders inside a partition (or store) folder that are not store names.
_RESERVED = {"SSTs", "logs", "_metadata"}


@dataclass(frozen=True, slots=True)
class Classified:
    """What a relative path is. State fields are set for files under `state/<op>/<part>/`.

    `main` is, for a `.crc` of either kind, the relative path of the file it checks.
    """

    rel: str
    kind: FileKind
    batch: int | None = None
    operator: int | None = None
    partition: int | None = None
    store: str | None = None
    version: int | None = None
    unique_id: str | None = None

    @property
    def main(self) -> str | None:
        """The file a checksum sidecar belongs to. Derived, not stored: half of a state folder's
        files are sidecars, and cleanup holds a partition's classified listing in memory."""
        if self.kind == FileKind.SPARK_CRC:
            return self.rel[: -len(".crc")]
        if self.kind == FileKind.HADOOP_CRC:
            folder, _, name = self.rel.rpartition("/")
            main = name[1 : -len(".crc")]
            return f"{folder}/{main}" if folder else main
        return None

    @property
    def batch_id(self) -> int:
        """The batch of a file that always names one (offsets, commits, operator metadata v2)."""
        if self.batch is None:
            raise ValueError(f"{self.rel} names no batch")
        return self.batch

    @property
    def version_id(self) -> int:
        """The version of a file that always names one (changelogs, zips and their sidecars)."""
        if self.version is None:
            raise ValueError(f"{self.rel} names no state version")
        return self.version


def parse_state_file(name: str) -> tuple[int, str | None, FileKind] | None:
    """(version, uuid or None for format V1, CHANGELOG or ZIP), or None when not a state file."""
    m = STATE_FILE.match(name)
    if not m:
        return None
    kind = FileKind.ZIP if m.group(3) == "zip" else FileKind.CHANGELOG
    # Interned: a version's changelog, zip and their sidecars name one id, held once.
    uid = m.group(2)
    return int(m.group(1)), None if uid is None else sys.intern(uid), kind


def classify(rel: str) -> Classified:
    parts = rel.split("/")
    name = parts[-1]
    if name.startswith(".") and name.endswith(".crc") and len(name) > len(".crc") + 1:
        # Hadoop's local checksum file system hides `.<name>.crc` beside every file it writes.
        return Classified(rel, FileKind.HADOOP_CRC)
    if rel == "metadata":
        return Classified(rel, FileKind.QUERY_METADATA)
    if rel in (FORK_STARTED, FORK_COMPLETE):
        return Classified(rel, FileKind.FORK_MARKER)
    if len(parts) == 2 and parts[0] in ("offsets", "commits") and BATCH_FILE.match(name):
        kind = FileKind.OFFSET if parts[0] == "offsets" else FileKind.COMMIT
        return Classified(rel, kind, batch=int(name))
    if len(parts) == 3 and parts[0] == "sources" and parts[1].isdigit() and SOURCE_LOG_FILE.match(name):
        return Classified(rel, FileKind.SOURCE_LOG, batch=int(name.split(".")[0]))
    if parts[0] == "state" and len(parts) >= 4 and parts[1].isdigit():
        return _classify_state(rel, parts)
    return Classified(rel, FileKind.UNKNOWN)


def _classify_state(rel: str, parts: list[str]) -> Classified:
    op = int(parts[1])
    name = parts[-1]
    rest = parts[2:]
    if rest == ["_metadata", "metadata"]:
        return Classified(rel, FileKind.OPERATOR_METADATA, operator=op)
    if len(rest) == 3 and rest[:2] == ["_metadata", "v2"] and BATCH_FILE.match(name):
        return Classified(rel, FileKind.OPERATOR_METADATA, operator=op, batch=int(name))
    if len(rest) == 3 and rest[0] == "_stateSchema" and SCHEMA_FILE.match(name):
        return Classified(
            rel, FileKind.STATE_SCHEMA, operator=op, store=rest[1], batch=int(name.split("_")[0])
        )
    if not rest[0].isdigit():
        return Classified(rel, FileKind.UNKNOWN)
    part = int(rest[0])
    inner = rest[1:]  # [store/]name, [store/]SSTs/name, [store/]_metadata/schema
    store = "default"
    if len(inner) >= 2 and inner[0] not in _RESERVED:
        store, inner = sys.intern(inner[0]), inner[1:]
    # Positional (batch, operator, partition, store, version, id), not a dict of keywords: cleanup
    # classifies every file of a partition, 10^4-10^5 of them.
    if len(inner) == 1:
        parsed = parse_state_file(name)
        if parsed:
            version, uid, kind = parsed
            return Classified(rel, kind, None, op, part, store, version, uid)
        if name.endswith(".crc"):
            main = parse_state_file(name[: -len(".crc")])
            if main:
                return Classified(rel, FileKind.SPARK_CRC, None, op, part, store, main[0], main[1])
        if name.startswith(MAINT_TEMP_PREFIX) and name.endswith(".tmp"):
            return Classified(rel, FileKind.MAINT_TEMP, None, op, part, store)
        return Classified(rel, FileKind.UNKNOWN)
    if inner == ["_metadata", "schema"]:
        # Schema file v1..v3, written once per store under partition 0 (not listed in the shared docs).
        return Classified(rel, FileKind.STATE_SCHEMA, None, op, part, store)
    if len(inner) == 2 and inner[0] == "SSTs" and SST_FILE.match(name):
        return Classified(rel, FileKind.SST, None, op, part, store)
    if len(inner) == 2 and inner[0] == "logs" and WAL_FILE.match(name):
        return Classified(rel, FileKind.WAL_LOG, None, op, part, store)
    return Classified(rel, FileKind.UNKNOWN)
