"""Readers of the metadata logs: commit log, offset log, operator metadata, query metadata.

Each file is a version line (`v<N>`) followed by JSON lines (docs/format.md §2). A version this
release does not know is an error that names the file: its layout is never guessed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from checkpoint.errors import MALFORMED, CorruptFileError, UnknownFormatVersionError
from checkpoint.format.layout import SOURCE_FOLDER, is_number
from checkpoint.format.sizes import SOURCE_LOG_LINE_BYTES
from checkpoint.format.spark import SHUFFLE_PARTITIONS
from checkpoint.policy import POLICY

COMMIT_VERSIONS = (1, 2, 3)  # v3 (Spark 4.2+) adds sink metadata
OFFSET_VERSIONS = (1, 2)  # v2 (Spark 4.2+) names its sources
OPERATOR_METADATA_VERSIONS = (1, 2)
# v2: what Spark 4.0 writes in a format V2 checkpoint's zips (and refuses v1 there); v1: 4.1 and later.
ZIP_METADATA_VERSIONS = (1, 2)

_VERSION_LINE = re.compile(r"^v([0-9]{1,9})\Z")


def split_versioned(data: bytes, path: str, supported: tuple[int, ...]) -> tuple[int, list[str]]:
    """(version, the remaining non-empty lines) of a `v<N>\\n...` file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(f"not UTF-8 text: {exc}", path) from exc
    lines = text.split("\n")
    head = lines[0].strip()
    if not head:
        raise CorruptFileError("empty file (no version line)", path)
    m = _VERSION_LINE.match(head)
    if not m:
        raise CorruptFileError(f"first line {head[:40]!r} is not a version line like 'v1'", path)
    version = int(m.group(1))
    if version not in supported:
        raise UnknownFormatVersionError(path, head, tuple(f"v{v}" for v in supported))
    return version, [line for line in lines[1:] if line.strip()]


def _json(line: str, path: str) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise CorruptFileError(f"invalid JSON: {exc}", path) from exc


def _json_object(lines: list[str], index: int, path: str, what: str) -> dict[str, Any]:
    if len(lines) <= index:
        raise CorruptFileError(f"missing the {what} line", path)
    value = _json(lines[index], path)
    if not isinstance(value, dict):
        raise CorruptFileError(f"the {what} line is not a JSON object", path)
    return value


@dataclass(frozen=True)
class CommitEntry:
    """`commits/<batch>`. `state_unique_ids[op][partition]` lists one id per store, in store order."""

    batch: int
    version: int
    next_batch_watermark_ms: int
    state_unique_ids: dict[int, tuple[tuple[str, ...], ...]] | None = None
    digest: str = ""  # sha256 of the file's bytes: a cleanup plan records what it was planned against


def commit_digest(data: bytes) -> str:
    """What a cleanup plan records of each commit file, to notice when one changes under it."""
    return hashlib.sha256(data).hexdigest()


def parse_commit(batch: int, data: bytes, path: str) -> CommitEntry:
    version, lines = split_versioned(data, path, COMMIT_VERSIONS)
    body = _json_object(lines, 0, path, "commit metadata")
    ids = body.get("stateUniqueIds")
    parsed: dict[int, tuple[tuple[str, ...], ...]] | None = None
    if ids is not None:
        try:
            parsed = {
                int(op): tuple(tuple(str(u) for u in store_ids) for store_ids in partitions)
                for op, partitions in ids.items()
            }
        except MALFORMED as exc:
            raise CorruptFileError(f"malformed stateUniqueIds: {exc}", path) from exc
    try:
        watermark = int(body.get("nextBatchWatermarkMs", 0))
    except MALFORMED as exc:
        raise CorruptFileError(f"malformed nextBatchWatermarkMs: {exc}", path) from exc
    return CommitEntry(batch, version, watermark, parsed, commit_digest(data))


@dataclass(frozen=True)
class OffsetEntry:
    """`offsets/<batch>`: the batch's conf and one raw line per source (kept verbatim)."""

    batch: int
    version: int
    batch_watermark_ms: int
    batch_timestamp_ms: int
    conf: dict[str, str] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    # (line, logOffset) of each file source among `sources`, whose log is `source_folder(line)`.
    file_sources: tuple[tuple[int, int], ...] = ()
    # v2 (Spark 4.2+): each line's key (`key:offset`), Spark's map from source to offset. Under
    # source evolution the key is the source's name, and its log's folder (`sources/<name>/`);
    # otherwise (`spark.sql.streaming.offsetLog.formatVersion=2` alone) it is the source's position
    # in the plan, the last one where the plan reads a source twice (Spark 4.3.0 wrote `1:` and
    # `2:` for a self-union and another source, in folders 0 and 1). v1 lines have no key, a line
    # per position.
    source_keys: tuple[str, ...] = ()

    def source_folder(self, line: int, folders: Container[str]) -> str | None:
        """The folder under `sources/` of source line `line`, given the folders there, or None when
        the file does not tell. Spark numbers a folder per distinct source, in the order the plan
        first reads them; a named source's folder is its name. So a query that reads one source
        twice (a self-union) has fewer folders than positions, and a position's folder is not
        known: in v1 a folder for the last line says that none is read twice, and the first line
        is always folder 0; in v2 the positions are the folders when they are 0 to n-1."""
        if self.named:
            return self.source_keys[line]
        if self.source_keys:
            return self.source_keys[line] if self._positions_are_folders else None
        return str(line) if line == 0 or str(len(self.sources) - 1) in folders else None

    def may_hold(self, line: int, folder: str) -> bool:
        """Whether `sources/<folder>/` may be the log of a line whose folder is not known: one
        numbered up to it in v1 (folders follow the positions' order), any in v2."""
        return bool(self.source_keys) or int(folder) <= line

    def may_name(self, folder: str) -> bool:
        """Whether a line may name `sources/<folder>/`: a name the file gives, or a folder number as
        Spark writes one (`7`, never `007`) below the count of sources."""
        if self.named:
            return folder in self._keys
        count = len(self._keys) if self.source_keys else len(self.sources)
        return _is_position(folder) and int(folder) < count

    @cached_property
    def named(self) -> bool:
        """Whether the keys are names: source evolution on, as the file's conf says, or a key that
        is no position."""
        keys = self.source_keys
        return bool(keys) and (self.conf.get(SOURCE_EVOLUTION) == "true" or not all(map(_is_position, keys)))

    # Once per file: a forged one holds tens of thousands of lines, each asked about.
    @cached_property
    def _keys(self) -> frozenset[str]:
        return frozenset(self.source_keys)

    @cached_property
    def _positions_are_folders(self) -> bool:
        return self._keys == {str(i) for i in range(len(self._keys))}

    @property
    def shuffle_partitions(self) -> int | None:
        """The state partitions of this batch: Spark pins the count in every offset file (checked
        and bounded when the file is parsed)."""
        value = self.conf.get(SHUFFLE_PARTITIONS)
        return int(value) if value is not None else None


def bounded_count(value: Any, what: str, path: str, limit: int = POLICY.max_state_partitions) -> int:
    """A count a checkpoint declares (partitions, stores), as an int from 1 to `limit`: anything
    else is a damaged or forged file, refused before anything is sized by it."""
    try:
        count = int(value)
    except MALFORMED as exc:
        raise CorruptFileError(f"{what} is not a number: {str(value)[:40]!r}", path) from exc
    if not 1 <= count <= limit:
        raise CorruptFileError(f"{what} is {str(count)[:40]}, outside 1-{limit}", path)
    return count


def parse_offset(batch: int, data: bytes, path: str) -> OffsetEntry:
    version, lines = split_versioned(data, path, OFFSET_VERSIONS)
    meta = _json_object(lines, 0, path, "offset metadata")
    conf = meta.get("conf") or {}
    if not isinstance(conf, dict):
        raise CorruptFileError("offset metadata 'conf' is not an object", path)
    try:
        watermark, timestamp = int(meta.get("batchWatermarkMs", 0)), int(meta.get("batchTimestampMs", 0))
    except MALFORMED as exc:
        raise CorruptFileError(f"malformed offset metadata: {exc}", path) from exc
    if SHUFFLE_PARTITIONS in conf:
        bounded_count(conf[SHUFFLE_PARTITIONS], SHUFFLE_PARTITIONS, path)
    sources = tuple(lines[1:])
    if version == 2 and len(sources) != len(_source_lines(data)):
        # Spark reads every line of a v2 file into its map, and fails on one without `:`
        raise CorruptFileError("a blank line among the v2 offsets lines, which names no source", path)
    keys = tuple(source_key(line, path) for line in sources) if version == 2 else ()
    # Spark reads v2 lines into a map: of a key given twice (which it never writes), the last line.
    last = {key: i for i, key in enumerate(keys)}
    offsets = (line[len(key) + 1 :] for line, key in zip(sources, keys, strict=True)) if keys else sources
    files = tuple(
        (i, n)
        for i, line in enumerate(offsets)
        if (not keys or last[keys[i]] == i) and (n := file_source_offset(line, path)) is not None
    )
    return OffsetEntry(batch, version, watermark, timestamp, {str(k): str(v) for k, v in conf.items()},
                       sources, files, keys)  # fmt: skip


SOURCE_EVOLUTION = "spark.sql.streaming.queryEvolution.enableSourceEvolution"


def _source_lines(data: bytes) -> list[str]:
    """The lines after the version and metadata lines, blank ones too, as Scala's `getLines`
    gives them: split at each newline only, none after a final one."""
    lines = data.decode("utf-8").split("\n")
    return lines[2 : -1 if lines[-1] == "" else None]


def _is_position(key: str) -> bool:
    return is_number(key, 10) and str(int(key)) == key


def source_key(line: str, path: str) -> str:
    """The key of a v2 offsets line (`left:{"logOffset":3}`, `1:-`): a source's name or its
    position, which names its log's folder, so it is checked as Spark checks a name (ASCII letters,
    digits, `_`). Spark's own reader fails on a line without `:`."""
    key = line.partition(":")[0]
    if not SOURCE_FOLDER.match(key) or len(key) == len(line):
        raise CorruptFileError(f"a v2 offsets line names no source (letters, digits, _): {line[:60]!r}", path)
    return key


_LOG_OFFSET = "logOffset"
_LONG_MAX = (1 << 63) - 1  # a Scala Long: what Spark reads a batch id as


def file_source_offset(line: str, path: str) -> int | None:
    """The `logOffset` of a file source's offset line (`{"logOffset":31}`): the newest entry of its
    log the batch reads. None for another source's line: `-` (no offset yet), Kafka's topics (one
    may be called logOffset: its value is an object), a rate source's number."""
    if f'"{_LOG_OFFSET}"' not in line:
        return None
    value = _json(line, path)
    if not isinstance(value, dict) or set(value) != {_LOG_OFFSET} or isinstance(value[_LOG_OFFSET], dict):
        return None
    n = value[_LOG_OFFSET]
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= _LONG_MAX:
        raise CorruptFileError(f"a file source's logOffset is {str(n)[:40]!r}, not a batch id", path)
    return n


_COMPACT = ".compact"
DEFAULT_COMPACT_INTERVAL = 10  # spark.sql.streaming.fileSource.log.compactInterval's default
_DIVISOR_SEARCH = 100_000  # candidates tried for an interval, of a forged name's 10^18


def source_log_gaps(listed: Mapping[str, int], log_offset: int) -> list[tuple[int, int]]:
    """The runs (first, last) of a file source's log entries that a restart reads and that are
    missing or empty among `listed` ({file name: size} of `sources/<i>/`), as Spark finds them
    (`CompactibleFileStreamLog`): starting, the source reads every entry from the compaction at or
    below its newest to its newest, each by the one name the compaction interval gives it
    (`<n>.compact` or `<n>`), the interval told by the two newest `.compact` files; and the batch
    reads up to its offset's (`log_offset`). Spark 4.3.0 failed on either ("batch 31 doesn't
    exist", "sources/0/29.compact doesn't exist"), and on an empty one ("Incomplete log file").
    Without any compaction every entry from 0 is read, by either name (the interval is the query's
    conf, not written anywhere). Computed from what is listed, never by counting through the
    range: a forged offset names any batch."""
    ids: dict[int, str] = {}  # Spark's own parse of a name (Long.parseLong: `007` is 7)
    for name in listed:
        digits = name.removesuffix(_COMPACT)
        if digits.isdigit() and int(digits) <= _LONG_MAX:
            ids[int(digits)] = name
    top = max(log_offset, max(ids, default=-1))
    compacts = sorted((e for e, name in ids.items() if name.endswith(_COMPACT)), reverse=True)
    if compacts:
        interval = _compact_interval(compacts)
        first = max(0, (top + 1) // interval * interval - 1)

        def whole(e: int) -> bool:
            name = f"{e}{_COMPACT}" if (e + 1) % interval == 0 else str(e)
            return listed.get(name, 0) > 0
    else:
        first = 0

        def whole(e: int) -> bool:
            return listed.get(str(e), 0) > 0 or listed.get(f"{e}{_COMPACT}", 0) > 0

    gaps, expected = [], first
    for e in sorted(e for e in ids if first <= e <= top and whole(e)):
        if e > expected:
            gaps.append((expected, e - 1))
        expected = e + 1
    if expected <= top:
        gaps.append((expected, top))
    return gaps


def _compact_interval(compacts: list[int]) -> int:
    """Spark's compaction interval from the `.compact` files, newest first: the distance between
    the two newest, or with one (Spark deletes the older ones), the first divisor of its batch
    count from the default up (`deriveCompactInterval`). A count no divisor is found for within a
    bounded search (a forged name; Spark's would search to half of it) is its own interval."""
    if len(compacts) >= 2:
        return compacts[0] - compacts[1]
    count = compacts[0] + 1
    if count <= DEFAULT_COMPACT_INTERVAL or DEFAULT_COMPACT_INTERVAL >= count // 2:
        return count
    last = min(count // 2, DEFAULT_COMPACT_INTERVAL + _DIVISOR_SEARCH)
    return next((i for i in range(DEFAULT_COMPACT_INTERVAL, last + 1) if count % i == 0), count)


def file_source_paths(batch: int, read: Callable[[int], bytes], path: str) -> list[str]:
    """The files a file source's log (`sources/<i>/<batch>`) gives `batch` to read: its
    `{"path", "timestamp", "batchId"}` lines (a `.compact` file holds the earlier batches' too).
    Another source's log (Kafka's initial offsets) names no path: none. Read from `read` a line at
    a time: a compaction of a long-running source lists every file it ever read, and a line longer
    than any entry (`SOURCE_LOG_LINE_BYTES`) is refused, not held."""
    lines = bounded_lines(read, SOURCE_LOG_LINE_BYTES, path)
    split_versioned(next(lines, b""), path, (1,))
    found = []
    for raw in lines:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFileError(f"not UTF-8 text: {exc}", path) from exc
        if line.strip() and isinstance(e := _json(line, path), dict):
            if isinstance(e.get("path"), str) and e.get("batchId") == batch:
                found.append(e["path"])
    return found


def bounded_lines(
    read: Callable[[int], bytes], limit: int, path: str, chunk: int = 1 << 16
) -> Iterator[bytes]:
    """The lines `read` yields (without their newline), each at most `limit` bytes: a longer one
    raises CorruptFileError, having held no more than the bound and a chunk."""
    rest = b""
    while block := read(chunk):
        *whole, rest = (rest + block).split(b"\n")
        for line in whole:
            _refuse_long(line, limit, path)
            yield line
        _refuse_long(rest, limit, path)
    if rest:
        yield rest


def _refuse_long(line: bytes, limit: int, path: str) -> None:
    if len(line) > limit:
        raise CorruptFileError(f"a line of more than {limit} bytes: not a log Spark writes", path)


@dataclass(frozen=True)
class StoreInfo:
    name: str
    num_partitions: int
    num_cols_prefix_key: int = 0
    schema_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class OperatorMetadata:
    """`state/<op>/_metadata/metadata` (v1) or `state/<op>/_metadata/v2/<batch>` (v2).

    The order of `stores` is the order of the ids in the commit log.
    """

    operator_id: int
    name: str
    version: int
    stores: tuple[StoreInfo, ...]
    properties: dict[str, Any] | None = None

    @property
    def is_transform_with_state(self) -> bool:
        return self.name.startswith("transformWithState")

    @property
    def keeps_column_families(self) -> bool:
        """Its state is RocksDB column families of one `default` store: transformWithState's state
        variables, TTL indexes and timers; a stream-stream join's four stores in join state format 3
        (which formats 1 and 2 keep as four stores of their own)."""
        join_cf = self.name == "symmetricHashJoin" and [s.name for s in self.stores] == ["default"]
        return self.is_transform_with_state or join_cf


def parse_operator_metadata(data: bytes, path: str) -> OperatorMetadata:
    version, lines = split_versioned(data, path, OPERATOR_METADATA_VERSIONS)
    body = _json_object(lines, 0, path, "operator metadata")
    try:
        info = body["operatorInfo"]
        declared = body["stateStoreInfo"]
        if not isinstance(declared, list) or len(declared) > POLICY.max_stores_per_operator:
            raise CorruptFileError(
                f"stateStoreInfo is not a list of at most {POLICY.max_stores_per_operator} stores", path
            )
        stores = tuple(_store_info(s, path) for s in declared)
        op_id, name = int(info["operatorId"]), str(info["operatorName"])
    except MALFORMED as exc:
        raise CorruptFileError(f"malformed operator metadata: missing or bad {exc}", path) from exc
    if not 0 <= op_id < 2**31:
        raise CorruptFileError(f"operatorId {str(op_id)[:40]} is not an operator id", path)
    if len({s.name for s in stores}) != len(stores):
        raise CorruptFileError("stateStoreInfo names a store twice", path)
    props = body.get("operatorPropertiesJson")
    properties = _json(props, path) if isinstance(props, str) and props else None
    return OperatorMetadata(op_id, name, version, stores, properties)


# A store's name becomes a folder (`state/<op>/<part>/<name>`): data, never a path.
_STORE_NAME = re.compile(r"^(?!\.{1,2}\Z)(?!SSTs\Z|logs\Z|_metadata\Z)[A-Za-z0-9_.-]{1,255}\Z")


def _store_info(s: dict[str, Any], path: str) -> StoreInfo:
    name = str(s["storeName"])
    if not _STORE_NAME.match(name):
        raise CorruptFileError(f"storeName {name[:60]!r} is not a store name Spark writes", path)
    paths = s.get("stateSchemaFilePaths") or []
    if not isinstance(paths, list) or len(paths) > POLICY.max_schema_paths:
        raise CorruptFileError(f"stateSchemaFilePaths is not a list of at most {POLICY.max_schema_paths}",
                               path)  # fmt: skip
    return StoreInfo(
        name,
        bounded_count(s["numPartitions"], "numPartitions", path),
        int(s.get("numColsPrefixKey", 0)),
        tuple(str(p) for p in paths),
    )


def parse_query_metadata(data: bytes, path: str) -> str:
    """The query id of `<ckpt>/metadata`."""
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise CorruptFileError("empty query metadata", path)
    body = _json(text.split("\n")[0], path)
    if not isinstance(body, dict) or "id" not in body:
        raise CorruptFileError("query metadata has no 'id'", path)
    return str(body["id"])
