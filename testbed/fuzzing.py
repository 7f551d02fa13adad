"""Mutational fuzzing of every reader of checkpoint files, seeded from files real queries wrote.

A reader given any bytes either returns or raises CheckpointError (a one-line refusal the CLI turns
into exit 1 or 2): any other exception is a crash, which is what the fuzz test and `bench/fuzz.py`
look for. Changelog bodies are mutated inside the compression, then framed again (lz4-java's block
format, with valid checksums), so the header and record parsers see the mutations and not only the
checksum that would refuse them first.
"""

from __future__ import annotations

import base64
import io
import json
import math
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from checkpoint import bounds
from checkpoint.errors import CheckpointError
from checkpoint.format import (
    SHUFFLE_PARTITIONS,
    FileKind,
    Lz4BlockReader,
    check_changelog,
    check_hadoop_crc,
    classify,
    parse_commit,
    parse_offset,
    parse_operator_metadata,
    parse_query_metadata,
    parse_sidecar,
    parse_zip_metadata,
    read_changelog,
    read_schema_file,
    read_snapshot,
    row_shape,
)
from checkpoint.policy import POLICY
from checkpoint.retire import Evidence, PlanRecord, RetirementPlan, file_line, parse_file_line
from checkpoint.safety import parse_held
from checkpoint.storage import FileInfo
from orchestration.due import SensorState
from testbed.lz4java import frame


def _changelog(body: bytes) -> object:
    return read_changelog(io.BytesIO(frame(body)).read, "lz4", "1_x.changelog")


def _checked_changelog(body: bytes) -> object:
    return check_changelog(io.BytesIO(frame(body)).read, "lz4", "1_x.changelog", chunk=64)


def _hadoop_checked(b: bytes) -> object:
    """A Hadoop checksum file and the bytes it covers, mutated together: a 4-byte length, the
    checksum file, then the data."""
    n = int.from_bytes(b[:4], "big")
    return check_hadoop_crc(io.BytesIO(b[4 + n :]).read, b[4 : 4 + n], "1.delta")


def _bounded_metadata(b: bytes) -> object:
    """Operator metadata as the model takes it: whatever parses declares a bounded layout."""
    meta = parse_operator_metadata(b, "state/0/_metadata/metadata")
    assert len(meta.stores) <= POLICY.max_stores_per_operator, len(meta.stores)
    for store in meta.stores:
        assert 1 <= store.num_partitions <= POLICY.max_state_partitions, store.num_partitions
        assert "/" not in store.name and store.name not in (".", ".."), store.name
        assert len(store.schema_paths) <= POLICY.max_schema_paths
    return meta


def _offset_conf(b: bytes) -> object:
    """An offset file around a mutated `conf`: a count it pins is a count the model is sized by."""
    entry = parse_offset(
        7, b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":' + b + b"}\n", "offsets/7"
    )
    count = entry.shuffle_partitions
    assert count is None or 1 <= count <= POLICY.max_state_partitions, count
    return entry


def _cursor(b: bytes) -> object:
    """The commit sensor's cursor, which anyone with the UI sets: the body packed as the sensor
    packs it, and the bytes as plain text. Any cursor reads as a state (an empty one and a warning
    when it is not one), and no time in it lies past now."""
    now = 1.7e9
    for text in ("z1:" + base64.b64encode(zlib.compress(b)).decode(), b.decode("utf-8", "replace")):
        state, _ = SensorState.read(text, now)
        for times in (state.validated, state.unvalidated, state.crossings):
            assert all(t <= now for t in times.values()), times
    return state


def _retirement_header(b: bytes) -> object:
    """A retirement manifest's header, which a person may edit: whatever parses is finite and in
    range, a count no bool."""
    plan = RetirementPlan.parse(b, "m.retire.jsonl")
    numbers = (plan.planned_at, plan.evidence.dormant_since, plan.evidence.dormant_seconds)
    assert all(math.isfinite(n) and 0 <= n <= bounds.MAX_INSTANT for n in numbers), numbers
    assert all(type(n) is int and 0 <= n <= bounds.MAX_COUNT for n in (plan.files, plan.total_bytes))
    return plan


def _retirement_line(b: bytes) -> object:
    path, size, mtime = parse_file_line(b, "m.retire.jsonl")
    assert type(size) is int and 0 <= size <= bounds.MAX_COUNT and isinstance(path, str)
    assert mtime is None or math.isfinite(mtime)
    return path


def _retirement_record(b: bytes) -> object:
    record = PlanRecord.parse(b, "retirements/x.json")
    assert math.isfinite(record.planned_at) and type(record.files) is int
    return record


def _held(b: bytes) -> object:
    """`held.json`, which anyone who can write the audit trail writes: kept figures are counts."""
    kept = parse_held(b, 1.6e9)
    assert kept is None or all(type(n) is int and 0 <= n <= bounds.MAX_COUNT for n in kept), kept
    return kept


# target -> what reads it, from bytes
TARGETS: dict[str, Callable[[bytes], object]] = {
    "commit": lambda b: parse_commit(7, b, "commits/7"),
    "offset": lambda b: parse_offset(7, b, "offsets/7"),
    "operator_metadata": _bounded_metadata,
    "offset_conf": _offset_conf,
    "query_metadata": lambda b: parse_query_metadata(b, "metadata"),
    "zip": lambda b: read_snapshot(io.BytesIO(b), "8_x.zip"),
    "zip_metadata": lambda b: parse_zip_metadata(b, "metadata"),
    "changelog_body": _changelog,
    "changelog_check": _checked_changelog,  # validation's deep read, a small window
    "changelog_stream": lambda b: read_changelog(io.BytesIO(b).read, "lz4", "1_x.changelog"),
    "sidecar": lambda b: parse_sidecar(b, "1_x.changelog.crc"),
    "hadoop_crc": _hadoop_checked,
    "state_schema": lambda b: row_shape(read_schema_file(b, "_metadata/schema")[0], "_metadata/schema"),
    "sensor_cursor": _cursor,
    "retirement_header": _retirement_header,
    "retirement_line": _retirement_line,
    "retirement_record": _retirement_record,
    "held": _held,
}


def seeds(checkpoint: Path) -> dict[str, bytes]:
    """One real file (or, for a changelog body, its decompressed bytes) per target."""
    found: dict[FileKind, Path] = {}
    for p in sorted(checkpoint.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            kind = classify(p.relative_to(checkpoint).as_posix()).kind
            if kind == FileKind.CHANGELOG and p.stat().st_size < 200:
                continue  # a file with records, not an empty version
            found.setdefault(kind, p)
    changelog = found[FileKind.CHANGELOG].read_bytes()
    zip_bytes = found[FileKind.ZIP].read_bytes()
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        zip_metadata = zf.read("metadata")
    return {
        "commit": found[FileKind.COMMIT].read_bytes(),
        "offset": found[FileKind.OFFSET].read_bytes(),
        "offset_conf": _state_conf(found[FileKind.OFFSET].read_bytes()),
        "operator_metadata": found[FileKind.OPERATOR_METADATA].read_bytes(),
        "query_metadata": found[FileKind.QUERY_METADATA].read_bytes(),
        "zip": zip_bytes,
        "zip_metadata": zip_metadata,
        "changelog_body": (body := Lz4BlockReader(io.BytesIO(changelog).read, "seed").read(-1)),
        "changelog_check": body,
        "changelog_stream": changelog,
        "sidecar": found[FileKind.SPARK_CRC].read_bytes(),
        "hadoop_crc": _with_hadoop_crc(found[FileKind.CHANGELOG]),
        "state_schema": found[FileKind.STATE_SCHEMA].read_bytes(),
        "sensor_cursor": _cursor_seed(checkpoint),
        **_handback_seeds(checkpoint),
    }


def _cursor_seed(checkpoint: Path) -> bytes:
    """The packed body of a cursor that has seen this checkpoint and its siblings."""
    keys = [f"root:{checkpoint.name}", f"root:{checkpoint.name}-2", "root:other/q"]
    state = SensorState(seen=dict.fromkeys(keys, 11), validated=dict.fromkeys(keys[:2], 1.6e9),
                        unvalidated={keys[2]: 1.6e9}, crossings={keys[0]: 1.6e9}, urgent=[keys[1]],
                        next_key=keys[1])  # fmt: skip
    return zlib.decompress(base64.b64decode(state.to_json()[3:]))


def _handback_seeds(checkpoint: Path) -> dict[str, bytes]:
    """What this tool hands a person and reads back, as it writes them for this checkpoint: a
    retirement manifest's header, a line of it, the plan's record, and `held.json`."""
    files = sorted((p for p in checkpoint.rglob("*") if p.is_file()), key=lambda p: p.as_posix())
    first = files[0]
    evidence = Evidence(last_commit=12, last_commit_at=1.6e9, last_offset=12, last_offset_at=1.6e9,
                        dormant_since=1.6e9, dormant_seconds=604800.0)  # fmt: skip
    plan = RetirementPlan(plan_id="20261129T031500123Z-0a1b2c3d", checkpoint=str(checkpoint),
                          planned_at=1795922100.123, evidence=evidence, files=len(files),
                          total_bytes=sum(p.stat().st_size for p in files), newest_file_at=1.6e9,
                          archive=f"{checkpoint}-archive")  # fmt: skip
    info = FileInfo(first.relative_to(checkpoint).as_posix(), first.stat().st_size, first.stat().st_mtime)
    return {
        "retirement_header": plan.header().encode(),
        "retirement_line": file_line(info),
        "retirement_record": PlanRecord.of(plan, "ab" * 32, 4096, str(checkpoint), (2049, 131)).dump(),
        "held": json.dumps({"since": 1.6e9, "files": len(files), "bytes": plan.total_bytes}).encode(),
    }


def _state_conf(offset: bytes) -> bytes:
    """The confs of an offset file that size or shape the state, alone: short, so that mutations
    land on them (the count of partitions above all)."""
    conf = json.loads(offset.decode().split("\n")[1])["conf"]
    kept = {
        k: v
        for k, v in conf.items()
        if k.startswith("spark.sql.streaming.stateStore") or k == SHUFFLE_PARTITIONS
    }
    return json.dumps(kept, separators=(",", ":")).encode()


def _with_hadoop_crc(path: Path) -> bytes:
    """`_hadoop_checked`'s input: the checksum file Hadoop wrote beside `path`, and its bytes."""
    crc = path.with_name(f".{path.name}.crc").read_bytes()
    return len(crc).to_bytes(4, "big") + crc + path.read_bytes()


def check(target: str, data: bytes) -> None:
    """Raises whatever the reader raises that is not a refusal (CheckpointError)."""
    try:
        TARGETS[target](data)
    except CheckpointError:
        pass
