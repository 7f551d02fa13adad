"""Where things live in a checkpoint: every relative path classified, state file names parsed.

Pure functions over relative paths; nothing here touches storage. A path that matches no rule is
UNKNOWN, and unknown files are never ours to change.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from enum import Enum
from typing import NamedTuple


class FileKind(str, Enum):
    QUERY_METADATA = "query_metadata"
    OFFSET = "offset"
    COMMIT = "commit"
    SOURCE_LOG = "source_log"
    OPERATOR_METADATA = "operator_metadata"
    STATE_SCHEMA = "state_schema"
    CHANGELOG = "changelog"
    ZIP = "zip"
    DELTA = "delta"  # the HDFS-backed store's changes of one version
    SNAPSHOT = "snapshot"  # the HDFS-backed store's whole map at one version
    SST = "sst"
    WAL_LOG = "wal_log"
    SPARK_CRC = "spark_crc"
    MAINT_TEMP = "maint_temp"  # this tool's own temp file while publishing a snapshot
    FORK_MARKER = "fork_marker"  # this tool's record of a fork in progress, and its completion
    HADOOP_CRC = "hadoop_crc"
    SPARK_TEMP = "spark_temp"  # written under a temp name, then renamed; a killed write leaves it
    UNKNOWN = "unknown"

    # What a state file is to a load, asked instead of compared with one engine's kind: each engine
    # has a base and a step (`providers.StateFiles`), and code that serves both asks which role.

    @property
    def is_base(self) -> bool:
        """A store's whole state at its version, which a load starts from and reads nothing older
        than: RocksDB's zip, the HDFS-backed store's snapshot."""
        return self in _BASES

    @property
    def is_step(self) -> bool:
        """One version's changes, replayed on a base: RocksDB's changelog, the HDFS-backed store's
        delta."""
        return self in _STEPS

    @property
    def lists_files(self) -> bool:
        """Needs files it names, kept beside it: RocksDB's zip, whose metadata lists its SSTs (and
        counts its keys). The HDFS-backed store's snapshot holds its map itself."""
        return self is FileKind.ZIP


# The kinds `classify` gives per file, as module names: on Python 3.11 `FileKind.ZIP` is a
# Python-level lookup (75 ns, a global 8 ns), and cleanup classifies every file of a partition.
_CHANGELOG, _ZIP, _DELTA, _SNAPSHOT, _SST, _SPARK_CRC, _HADOOP_CRC = (
    FileKind.CHANGELOG, FileKind.ZIP, FileKind.DELTA, FileKind.SNAPSHOT, FileKind.SST, FileKind.SPARK_CRC,
    FileKind.HADOOP_CRC)  # fmt: skip
# The kinds of state file, by the extension their names end in.
_STATE_KINDS = {"zip": _ZIP, "changelog": _CHANGELOG, "delta": _DELTA, "snapshot": _SNAPSHOT}
_BASES, _STEPS = frozenset({_ZIP, _SNAPSHOT}), frozenset({_CHANGELOG, _DELTA})


UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# Numbers in names are ASCII digits: `\d` and `str.isdigit` also take other scripts' digits (`٣`)
# and superscripts (`²`, which int() refuses), which Spark never writes. Names end at `\Z`: `$`
# also matches before a final newline, and `1_<uuid>.zip\n` is not Spark's.
# docs/format.md §1: `<version>[_<uuid>].(zip|changelog)`, and the HDFS-backed store's
# `<version>.(delta|snapshot)` (§11); the version is batch id + 1.
# Batch ids and versions are Java longs (19 digits at most, and no more than LONG_MAX: Spark's own
# log reader skips a name that does not parse as one), RocksDB's file numbers uint64 (20 digits),
# operators and partitions ints (10). A longer run of digits is not Spark's, and never becomes an
# int here: an absurd id costs nothing, and Python refuses int() of 4,300 digits and more.
LONG_MAX = 2**63 - 1
STATE_FILE = re.compile(rf"^([0-9]{{1,19}})(?:(?:_({UUID}))?\.(zip|changelog)|\.(delta|snapshot))\Z")
SST_FILE = re.compile(rf"^[0-9]{{1,20}}-{UUID}\.sst\Z")
WAL_FILE = re.compile(rf"^[0-9]{{1,20}}-{UUID}\.log\Z")
BATCH_FILE = re.compile(r"^[0-9]{1,19}\Z")
SCHEMA_FILE = re.compile(rf"^[0-9]{{1,19}}_{UUID}\Z")
SOURCE_LOG_FILE = re.compile(r"^[0-9]{1,19}(?:\.compact)?\Z")
# A source's log folder, `sources/<i>/`, or under source evolution (Spark 4.2+, offsets v2)
# `sources/<name>/`: Spark takes a source's name only of ASCII letters, digits and underscores, of
# any length (an object store's key holds 1,024 bytes: a longer name is no folder there).
SOURCE_FOLDER = re.compile(r"^[A-Za-z0-9_]{1,1000}\Z")

# Spark's own temp name for a file it writes whole and then renames (CheckpointFileManager's
# `createAtomic`): `.<name>.<uuid>[.TID<task attempt>].tmp` beside the final name.
SPARK_TEMP_FILE = re.compile(rf"^\.(.+)\.{UUID}(?:\.TID[0-9]{{1,20}})?\.tmp\Z")

# This tool's temp files while it publishes a snapshot: recognised, so a crash leaves a known orphan.
MAINT_TEMP_PREFIX = ".ckpt-maint-"

# This tool's plans, outcomes, leases and repartition backups: beside the checkpoints, never inside
# one, and never a checkpoint to maintain (discovery does not look inside).
AUDIT_FOLDER = "_ckpt_audit"

# A fork writes the first into its destination before anything else and the second after
# everything else: the first without the second is an interrupted fork, which no query may start on.
FORK_STARTED = "_ckpt_fork.json"
FORK_COMPLETE = "_ckpt_fork.complete.json"

# Folders inside a partition (or store) folder that are not store names.
RESERVED_FOLDERS = {"SSTs", "logs", "_metadata"}


class Classified(NamedTuple):
    """What a relative path is. State fields are set for files under `state/<op>/<part>/`.

    `main` is, for a `.crc` of either kind, the relative path of the file it checks. A named tuple,
    not a frozen dataclass: cleanup classifies every file of a partition (10^4-10^5 of them), and a
    tuple is built in one step where a frozen dataclass sets each of its eight fields in turn.
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
    def carries_id(self) -> bool:
        """Named with an id: format V2's names, whose changelogs lead with a lineage header."""
        return self.unique_id is not None

    @property
    def main(self) -> str | None:
        """The file a checksum sidecar belongs to. Derived, not stored: half of a state folder's
        files are sidecars, and cleanup holds a partition's classified listing in memory."""
        main_of = SIDECAR_MAIN.get(self.kind)
        return None if main_of is None else main_of(self.rel)

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


def _spark_sidecar_main(rel: str) -> str:
    return rel[: -len(".crc")]


def _hadoop_sidecar_main(rel: str) -> str:
    folder, _, name = rel.rpartition("/")
    main = name[1 : -len(".crc")]
    return f"{folder}/{main}" if folder else main


# How a sidecar's path names its main file, by the sidecar's kind. Spark's first: a Hadoop `.crc`
# may check a Spark `.crc` (`.x.crc.crc`), whose fate cleanup must know first.
SIDECAR_MAIN: dict[FileKind, Callable[[str], str]] = {
    FileKind.SPARK_CRC: _spark_sidecar_main,
    FileKind.HADOOP_CRC: _hadoop_sidecar_main,
}


def is_number(part: str, digits: int = 19) -> bool:
    """A name written as a number: ASCII digits only, `digits` at most (a long's 19 by default; an
    operator or a partition is an int, 10)."""
    return len(part) <= digits and part.isascii() and part.isdigit()


def is_batch_id(name: str) -> bool:
    """A name Spark's log reader takes for a batch id: a long."""
    return BATCH_FILE.match(name) is not None and int(name) <= LONG_MAX


def parse_state_file(name: str) -> tuple[int, str | None, FileKind] | None:
    """(version, uuid or None for format V1, its kind: CHANGELOG, ZIP, DELTA or SNAPSHOT), or None
    when not a state file."""
    m = STATE_FILE.match(name)
    if not m:
        return None
    version, uid, ext, hdfs = m.groups()
    return int(version), uid, _STATE_KINDS[ext or hdfs]


# A state file or its Spark sidecar in one match: a partition folder is mostly these. The
# HDFS-backed store's files carry no id (it has no format V2).
_STATE_FILE_OR_CRC = re.compile(
    rf"^([0-9]{{1,19}})(?:(?:_({UUID}))?\.(zip|changelog)|\.(delta|snapshot))(\.crc)?\Z"
)


# A named tuple's own constructor is a Python function (a frame per call, 0.2 µs): the files every
# partition is mostly made of are built by `tuple.__new__` with every field given, in field order.
_new = tuple.__new__


def classify(rel: str, ids: dict[str, str] | None = None) -> Classified:
    """What `rel` is. `ids`, given by a caller classifying a whole listing, holds each state file id
    once: a version's changelog, zip and their sidecars name one id. A dict of the listing's own,
    not `sys.intern`: the interpreter's table holds every interned string of the process, and
    growing it reallocates the whole of it (4 MB in a Dagster process) in the middle of a plan."""
    folder, slash, name = rel.rpartition("/")
    if name.startswith(".") and name.endswith(".crc") and len(name) > len(".crc") + 1:
        # Hadoop's local checksum file system hides `.<name>.crc` beside every file it writes (on
        # local disks, half the files): told by the name alone, before the folder is looked at.
        return _new(Classified, (rel, _HADOOP_CRC, None, None, None, None, None, None))
    shape, op, part, store = _folder(folder) if slash else _AT_ROOT
    # Positional (batch, operator, partition, store, version, id), not keywords: the common path.
    if shape == _STATE:  # first: nearly every file of a checkpoint is a state file
        m = _STATE_FILE_OR_CRC.match(name)
        if m:
            version, uid, ext, hdfs, crc = m.groups()
            if uid is not None and ids is not None:
                uid = ids.setdefault(uid, uid)
            kind = _SPARK_CRC if crc else _STATE_KINDS[ext or hdfs]
            return _new(Classified, (rel, kind, None, op, part, store, int(version), uid))
        if name.startswith(MAINT_TEMP_PREFIX) and name.endswith(".tmp"):
            return Classified(rel, FileKind.MAINT_TEMP, None, op, part, store)
    elif shape == _SSTS:
        if SST_FILE.match(name):
            return _new(Classified, (rel, _SST, None, op, part, store, None, None))
    elif shape == _WALS:
        if WAL_FILE.match(name):
            return Classified(rel, FileKind.WAL_LOG, None, op, part, store)
    elif shape == _STORE_METADATA:
        if name == "schema":
            # Schema file v1..v3, written once per store under partition 0 (not listed in the shared docs).
            return Classified(rel, FileKind.STATE_SCHEMA, None, op, part, store)
    elif shape == _ROOT:
        if name == "metadata":
            return Classified(rel, FileKind.QUERY_METADATA)
        if name in (FORK_STARTED, FORK_COMPLETE):
            return Classified(rel, FileKind.FORK_MARKER)
    elif shape == _OFFSETS or shape == _COMMITS:
        if is_batch_id(name):
            return Classified(rel, FileKind.OFFSET if shape == _OFFSETS else FileKind.COMMIT, batch=int(name))
    elif shape == _SOURCE_LOG:
        if SOURCE_LOG_FILE.match(name):
            return Classified(rel, FileKind.SOURCE_LOG, batch=int(name.split(".")[0]))
    elif shape == _OPERATOR_METADATA:
        if name == "metadata":
            return Classified(rel, FileKind.OPERATOR_METADATA, operator=op)
    elif shape == _OPERATOR_METADATA_V2:
        if is_batch_id(name):
            return Classified(rel, FileKind.OPERATOR_METADATA, operator=op, batch=int(name))
    elif shape == _STATE_SCHEMAS:
        if SCHEMA_FILE.match(name):
            batch = int(name.split("_")[0])
            return Classified(rel, FileKind.STATE_SCHEMA, operator=op, store=store, batch=batch)
    if shape != _NOTHING and name.startswith(".") and SPARK_TEMP_FILE.match(name):
        return Classified(rel, FileKind.SPARK_TEMP, None, op, part, store)
    return Classified(rel, FileKind.UNKNOWN)


# What the files directly in a folder can be: decided once per folder, by `_folder`. A partition
# holds 10^4-10^5 files in a few folders, and cleanup classifies every one of them.
(_NOTHING, _ROOT, _OFFSETS, _COMMITS, _SOURCE_LOG, _OPERATOR_METADATA, _OPERATOR_METADATA_V2, _STATE_SCHEMAS,
 _STATE, _SSTS, _WALS, _STORE_METADATA) = range(12)  # fmt: skip
_IN_STORE = {"SSTs": _SSTS, "logs": _WALS, "_metadata": _STORE_METADATA}  # a store's subfolders
_Shape = tuple[int, "int | None", "int | None", "str | None"]
_NO_FOLDER: _Shape = (_NOTHING, None, None, None)
_AT_ROOT: _Shape = (_ROOT, None, None, None)


@functools.lru_cache(maxsize=4096)
def _folder(folder: str) -> _Shape:
    """(shape, operator, partition, store) of the files directly in `folder`."""
    parts = folder.split("/")
    top, n = parts[0], len(parts)
    if top == "offsets" or top == "commits":
        return (_OFFSETS if top == "offsets" else _COMMITS, None, None, None) if n == 1 else _NO_FOLDER
    if top == "sources":
        return (_SOURCE_LOG, None, None, None) if n == 2 and SOURCE_FOLDER.match(parts[1]) else _NO_FOLDER
    if top != "state" or n < 3 or not is_number(parts[1], 10):
        return _NO_FOLDER
    op = int(parts[1])
    if not is_number(parts[2], 10):
        if parts[2] == "_metadata":
            if n == 3:
                return (_OPERATOR_METADATA, op, None, None)
            if n == 4 and parts[3] == "v2":
                return (_OPERATOR_METADATA_V2, op, None, None)
        elif parts[2] == "_stateSchema" and n == 4:
            return (_STATE_SCHEMAS, op, None, parts[3])
        return _NO_FOLDER
    part = int(parts[2])
    # After the partition: [store/]name, [store/]SSTs/name, [store/]logs/name, [store/]_metadata/schema
    store, first = "default", 3
    if n >= 4 and parts[3] not in RESERVED_FOLDERS:
        store, first = sys.intern(parts[3]), 4
    if n == first:
        return (_STATE, op, part, store)
    if n == first + 1:
        return (_IN_STORE.get(parts[first], _NOTHING), op, part, store)
    return _NO_FOLDER
