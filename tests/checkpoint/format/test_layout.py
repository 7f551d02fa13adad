"""Classification of checkpoint paths: pure, no storage."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint.format.layout import FileKind, classify, parse_state_file

U = "83f71141-5fc2-4c14-8508-70d55d699b3e"


@pytest.mark.parametrize(
    ("rel", "kind"),
    [
        ("metadata", FileKind.QUERY_METADATA),
        ("offsets/12", FileKind.OFFSET),
        ("commits/0", FileKind.COMMIT),
        ("sources/0/9", FileKind.SOURCE_LOG),
        ("sources/1/9.compact", FileKind.SOURCE_LOG),
        # Under source evolution (Spark 4.2+) a source's log is its name's folder.
        ("sources/left_src/9", FileKind.SOURCE_LOG),
        ("sources/Orders_2/19.compact", FileKind.SOURCE_LOG),
        ("state/0/_metadata/metadata", FileKind.OPERATOR_METADATA),
        ("state/0/_metadata/v2/0", FileKind.OPERATOR_METADATA),
        (f"state/0/_stateSchema/default/0_{U}", FileKind.STATE_SCHEMA),
        ("state/0/0/_metadata/schema", FileKind.STATE_SCHEMA),
        ("state/0/0/left-keyToNumValues/_metadata/schema", FileKind.STATE_SCHEMA),
        (f"state/0/3/12_{U}.changelog", FileKind.CHANGELOG),
        (f"state/0/3/12_{U}.zip", FileKind.ZIP),
        ("state/0/3/12.changelog", FileKind.CHANGELOG),
        ("state/0/3/12.zip", FileKind.ZIP),
        ("state/0/3/12.delta", FileKind.DELTA),
        ("state/0/3/right-keyToNumValues/12.snapshot", FileKind.SNAPSHOT),
        (f"state/0/3/.12.delta.{U}.TID7.tmp", FileKind.SPARK_TEMP),
        (f"state/1/0/right-keyWithIndexToValue/7_{U}.zip", FileKind.ZIP),
        (f"state/0/0/SSTs/000008-{U}.sst", FileKind.SST),
        (f"state/0/0/.ckpt-maint-12_{U}.zip.0a1b2c.tmp", FileKind.MAINT_TEMP),
        (f"state/0/0/.12_{U}.changelog.0a1b2c.tmp", FileKind.UNKNOWN),  # Spark's own temp file: not ours
        (f"state/0/0/logs/000004-{U}.log", FileKind.WAL_LOG),
        (f"state/0/0/12_{U}.changelog.crc", FileKind.SPARK_CRC),
        (f"state/0/0/.12_{U}.changelog.crc", FileKind.HADOOP_CRC),
        (f"state/0/0/.12_{U}.changelog.crc.crc", FileKind.HADOOP_CRC),
        ("commits/.3.crc", FileKind.HADOOP_CRC),
        # Not ours: never to be touched by anything that deletes.
        ("offsets/3.tmp", FileKind.UNKNOWN),
        ("state/0/0/12_NOTAUUID.changelog", FileKind.UNKNOWN),
        (f"state/0/0/12_{U.upper()}.zip", FileKind.UNKNOWN),
        (f"state/0/0/12_{U}.delta", FileKind.UNKNOWN),  # the HDFS-backed store writes no ids
        ("state/x/0/1.zip", FileKind.UNKNOWN),
        ("README", FileKind.UNKNOWN),
        ("state/0/0/SSTs/notes.txt", FileKind.UNKNOWN),
        # The positional classifier's other shapes: a store folder before SSTs/ and sidecars, too deep,
        # a sidecar of a sidecar that is not hidden, metadata that is not a batch.
        (f"state/0/0/left-keyToNumValues/SSTs/000008-{U}.sst", FileKind.SST),
        (f"state/0/0/left-keyToNumValues/12_{U}.changelog.crc", FileKind.SPARK_CRC),
        (f"state/0/0/left-keyToNumValues/logs/000004-{U}.log", FileKind.WAL_LOG),
        (f"state/0/0/a/b/12_{U}.zip", FileKind.UNKNOWN),
        (f"state/0/0/12_{U}.zip.crc.crc", FileKind.UNKNOWN),
        ("state/0/_metadata/v2/x", FileKind.UNKNOWN),
        ("state/0/_metadata/other", FileKind.UNKNOWN),
        ("state/0/x/SSTs", FileKind.UNKNOWN),
        (".crc", FileKind.UNKNOWN),
        # Each folder's shape is decided once, apart from the names in it: a name right for one
        # folder is nothing in another, and a root file is one without any slash.
        ("/metadata", FileKind.UNKNOWN),
        ("offsets/0/12", FileKind.UNKNOWN),
        ("sources/0/1/9", FileKind.UNKNOWN),
        ("sources/a-b/9", FileKind.UNKNOWN),  # no name Spark takes
        ("sources/" + "x" * 1001 + "/9", FileKind.UNKNOWN),
        ("sources/left_src/x", FileKind.UNKNOWN),
        (f"state/0/0/SSTs/12_{U}.zip", FileKind.UNKNOWN),
        (f"state/0/0/logs/000008-{U}.sst", FileKind.UNKNOWN),
        (f"state/0/0/SSTs/SSTs/000008-{U}.sst", FileKind.UNKNOWN),
        (f"state/0/_stateSchema/default/x/0_{U}", FileKind.UNKNOWN),
        ("state/0/0/_metadata/metadata", FileKind.UNKNOWN),
        # Digits Spark never writes: a superscript (which int() refuses) or another script's digit.
        ("state/\u00b2/0/1.zip", FileKind.UNKNOWN),
        ("state/0/\u00b2/1.zip", FileKind.UNKNOWN),
        ("state/\u0663/0/1.zip", FileKind.UNKNOWN),
        (f"state/0/0/\u0661_{U}.zip", FileKind.UNKNOWN),
        ("offsets/\u0663", FileKind.UNKNOWN),
        ("sources/\u00b2/1", FileKind.UNKNOWN),
    ],
)
def test_classify(rel: str, kind: FileKind) -> None:
    assert classify(rel).kind == kind


def test_state_file_fields_and_sidecar_owner() -> None:
    c = classify(f"state/2/3/left-keyWithIndexToValue/12_{U}.zip")
    assert (c.operator, c.partition, c.store, c.version, c.unique_id) == (
        2,
        3,
        "left-keyWithIndexToValue",
        12,
        U,
    )
    assert classify(f"state/0/1/5_{U}.zip").store == "default"
    crc = classify(f"state/0/1/5_{U}.changelog.crc")
    assert crc.main == f"state/0/1/5_{U}.changelog" and crc.version == 5 and crc.unique_id == U
    assert classify(f"state/0/1/.5_{U}.zip.crc").main == f"state/0/1/5_{U}.zip"
    assert classify(".metadata.crc").main == "metadata"  # a Hadoop crc at the root
    assert classify(f"state/0/1/5_{U}.zip").main is None
    sst = classify(f"state/3/4/right/SSTs/000008-{U}.sst")
    assert (sst.operator, sst.partition, sst.store) == (3, 4, "right")


@given(st.integers(min_value=0, max_value=10**12), st.uuids(version=4), st.sampled_from(["zip", "changelog"]))
def test_state_file_names_round_trip(version: int, uid: uuid.UUID, ext: str) -> None:
    parsed = parse_state_file(f"{version}_{uid}.{ext}")
    assert parsed is not None
    assert parsed[:2] == (version, str(uid))
    assert parse_state_file(f"{version}.{ext}")[:2] == (version, None)
    assert parse_state_file(f"{version}_{uid}.{ext}.tmp") is None
