"""The metadata-log readers on inputs Spark 4.3's default queries do not write (v3 commits, v2 offsets).

The corpus covers v1/v2 commits, v1 offsets and operator metadata v1/v2 from real queries; v2
offsets, which Spark 4.3 writes under source evolution, come from a real query in
`tests/checkpoint/fork/test_named_sources.py`.
"""

from __future__ import annotations

import json

import pytest

from checkpoint.errors import CorruptFileError, UnknownFormatVersionError
from checkpoint.format.logs import (
    parse_commit,
    parse_offset,
    parse_operator_metadata,
    parse_query_metadata,
    source_log_gaps,
)

U1, U2 = "83f71141-5fc2-4c14-8508-70d55d699b3e", "19548c67-22c4-493a-9f69-4b888fcd62ce"


def test_commit_v3_keeps_the_state_ids() -> None:
    body = json.dumps(
        {"nextBatchWatermarkMs": 5, "stateUniqueIds": {"0": [[U1], [U2]]}, "sinkMetadata": {"x": 1}}
    )
    data = f"v3\n{body}".encode()
    entry = parse_commit(7, data, "commits/7")
    assert entry.version == 3 and entry.next_batch_watermark_ms == 5
    assert entry.state_unique_ids == {0: ((U1,), (U2,))}


def test_offset_v2_names_each_source_and_its_log_folder() -> None:
    """As Spark 4.3.0 writes it under source evolution (every source named, in a map's order):
    `name:offset` lines, each file source's log in `sources/<name>/`."""
    conf = {
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
    }
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": conf}
    lines = 'right_src:{"logOffset":3}\nkafka:{"t":{"0":1}}\nnone_yet:-\nleft_src:{"logOffset":0}\n7:-'
    entry = parse_offset(3, f"v2\n{json.dumps(meta)}\n{lines}\n".encode(), "offsets/3")
    assert entry.version == 2 and entry.shuffle_partitions == 8 and entry.named
    assert entry.sources[0] == 'right_src:{"logOffset":3}'  # verbatim
    assert entry.source_keys == ("right_src", "kafka", "none_yet", "left_src", "7")
    assert entry.file_sources == ((0, 3), (3, 0))
    assert [entry.source_folder(line, set()) for line, _ in entry.file_sources] == ["right_src", "left_src"]
    assert [entry.may_name(f) for f in ("left_src", "kafka", "7", "0", "other")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def _v2(*lines: str, evolution: str | None = None) -> bytes:
    conf = (
        {} if evolution is None else {"spark.sql.streaming.queryEvolution.enableSourceEvolution": evolution}
    )
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": conf})
    return "\n".join(["v2", meta, *lines]).encode()


def test_offset_v2_without_source_evolution_keys_each_source_by_its_plan_position() -> None:
    """`spark.sql.streaming.offsetLog.formatVersion=2` alone: Spark 4.3.0 wrote `1:` and `2:` for a
    self-union and another source (the last position of each), their logs in folders 0 and 1."""
    union = parse_offset(0, _v2('1:{"logOffset":0}', '2:{"logOffset":4}', evolution="false"), "offsets/0")
    assert not union.named and union.file_sources == ((0, 0), (1, 4))
    assert [union.source_folder(line, {"0", "1"}) for line in (0, 1)] == [None, None]  # not told
    assert [union.may_hold(0, f) for f in ("0", "1")] == [True, True]
    assert [union.may_name(f) for f in ("0", "1", "2", "01")] == [True, True, False, False]
    # Positions 0 to n-1: no source read twice, each position its folder, in whatever order.
    plain = parse_offset(0, _v2('1:{"logOffset":4}', '0:{"logOffset":0}'), "offsets/0")
    assert [plain.source_folder(line, set()) for line, _ in plain.file_sources] == ["1", "0"]
    # Digits as names are names when the conf says source evolution was on.
    named = parse_offset(0, _v2('1:{"logOffset":4}', evolution="true"), "offsets/0")
    assert named.named and named.source_folder(0, set()) == "1"


def test_a_key_given_twice_is_read_as_spark_reads_a_map_the_last_line() -> None:
    entry = parse_offset(
        0, _v2('orders:{"logOffset":9}', 'returns:{"logOffset":2}', 'orders:{"logOffset":2}'), "x"
    )
    assert entry.named and entry.file_sources == ((1, 2), (2, 2))


@pytest.mark.parametrize(
    "line",
    [
        '{"logOffset":3}',
        '../x:{"logOffset":3}',
        ':{"logOffset":3}',
        'a b:{"logOffset":3}',
        "-",
        "x" * 1001 + ":-",
    ],
)
def test_a_v2_offsets_line_that_names_no_source_as_spark_names_one_is_refused(line: str) -> None:
    """Spark's own reader fails on a line with no `:`; a name it would not take (a path, a space,
    nothing, longer than an object store's key) is no folder to read either."""
    with pytest.raises(CorruptFileError, match="names no source"):
        parse_offset(3, f"v2\n{_META}\n{line}\n".encode(), "offsets/3")


def test_a_long_source_name_is_a_name() -> None:
    """Spark bounds no name's length; an object store holds a 1,000-character folder name."""
    entry = parse_offset(0, _v2("x" * 1000 + ':{"logOffset":0}', evolution="true"), "offsets/0")
    assert entry.source_folder(0, set()) == "x" * 1000


_META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def test_v1_offsets_name_their_file_sources_by_line() -> None:
    # No offset yet; Kafka (a topic may be called logOffset); a rate source; a file source.
    lines = ["-", '{"logOffset":{"0":5}}', "7", '{"logOffset":3}', '{"t":{"0":1}}', '{"logOffset": 0}']
    entry = parse_offset(4, (f"v1\n{_META}\n" + "\n".join(lines)).encode(), "offsets/4")
    assert entry.file_sources == ((3, 3), (5, 0))


@pytest.mark.parametrize("value", ["-1", str(1 << 63), '"3"', "true", "1.5", "null"])
def test_a_file_source_offset_that_is_no_batch_id_is_refused(value: str) -> None:
    with pytest.raises(CorruptFileError, match="logOffset"):
        parse_offset(4, f'v1\n{_META}\n{{"logOffset":{value}}}'.encode(), "offsets/4")


def _log(*entries: int, compact: tuple[int, ...] = (), empty: tuple[int, ...] = ()) -> dict[str, int]:
    """{file name: size} of a source's log: `<n>.compact` for the compactions, `<n>` otherwise."""
    names = {e: f"{e}.compact" if e in compact else str(e) for e in entries}
    return {name: 0 if e in empty else 70 for e, name in names.items()}


@pytest.mark.parametrize(
    ("listed", "offset", "gaps"),
    [
        ({}, 0, [(0, 0)]),
        (_log(*range(6)), 5, []),
        (_log(*range(32), compact=(9, 19, 29)), 31, []),
        (_log(*range(31), compact=(9, 19, 29)), 31, [(31, 31)]),
        # Below the newest compaction nothing is read: the compaction holds it (Spark deletes it later).
        (_log(*range(20, 32), compact=(29,)), 31, []),
        (_log(*range(29), 30, 31, compact=(9, 19)), 31, [(29, 29)]),
        # 19.compact gone: the two newest (9, 29) say an interval of 20, so Spark reads 19.compact
        # and a plain 29 ("19.compact doesn't exist (latestId: 31, compactInterval: 20)").
        (_log(*range(19), *range(20, 32), compact=(9, 29)), 31, [(19, 19), (29, 29)]),
        # 29 written plainly where the interval says 29.compact: Spark reads only the latter.
        (_log(*range(32), compact=(9, 19)), 31, [(29, 29)]),
        # One compaction left (Spark deleted the older): the interval is its count's divisor from 10.
        (_log(*range(1009, 1015), compact=(1009,)), 1014, []),
        (_log(*range(1009, 1015), compact=(1009,), empty=(1012,)), 1014, [(1012, 1012)]),
        (_log(*range(8)), 5, []),  # the log ahead of the offsets, as after a kill between the two
        (_log(*range(6), 7), 5, [(6, 6)]),
        (_log(*range(6), empty=(3,)), 5, [(3, 3)]),  # "Incomplete log file"
        ({**_log(*range(5)), "005": 70}, 5, [(5, 5)]),  # Spark reads `5`, never `005`
        ({**_log(*range(6)), str(1 << 64): 70}, 5, []),  # no Long: Spark skips the name
        ({}, 10**18, [(0, 10**18)]),  # a forged offset costs nothing
        (_log(9, 10**18, compact=(9,)), 10**18, [(10**18 - 1, 10**18 - 1)]),  # a compaction at 10^18 - 1
        (_log(10**18 - 1, compact=(10**18 - 1,)), 10**18 - 1, []),  # a forged compaction: bounded search
    ],
)
def test_the_source_log_entries_a_restart_reads(listed: dict[str, int], offset: int, gaps: list) -> None:
    assert source_log_gaps(listed, offset) == gaps


@pytest.mark.parametrize(
    ("line", "lines", "folders", "folder"),
    [
        (0, 1, {"0"}, "0"),
        (1, 2, {"0", "1"}, "1"),
        (1, 2, {"1"}, "1"),  # folder 0 lost: the later line's is still known
        (0, 3, {"0", "1"}, "0"),
        (1, 3, {"0", "1"}, None),
        (2, 3, {"0", "1"}, None),
        (1, 2, set(), None),
        (1, 2, {"0", "5"}, None),  # a folder past the lines names none
    ],
)
def test_a_v1_source_line_names_its_folder_only_when_no_source_is_read_twice(
    line: int, lines: int, folders: set[str], folder: str | None
) -> None:
    entry = parse_offset(4, (f"v1\n{_META}\n" + "\n".join(['{"logOffset":0}'] * lines)).encode(), "offsets/4")
    assert entry.source_folder(line, folders) == folder
    assert [entry.may_name(f) for f in (str(lines - 1), str(lines), f"0{lines - 1}")] == [True, False, False]


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (b"", CorruptFileError, "empty file"),
        (b"\n\n", CorruptFileError, "empty file"),
        (b"version 2\n{}", CorruptFileError, "not a version line"),
        (b"v4\n{}", UnknownFormatVersionError, "'v4'"),
        (b"v2\n", CorruptFileError, "missing the commit metadata line"),
        (b"v2\n[1,2]", CorruptFileError, "not a JSON object"),
        (b'v2\n{"stateUniqueIds":{"x":[]}}', CorruptFileError, "malformed stateUniqueIds"),
        (b"\xff\xfe", CorruptFileError, "not UTF-8"),
    ],
)
def test_bad_commit_files(data: bytes, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as err:
        parse_commit(1, data, "ckpt/commits/1")
    assert "ckpt/commits/1" in str(err.value)


def test_operator_metadata_errors_name_the_file() -> None:
    with pytest.raises(CorruptFileError, match="state/0/_metadata/metadata: malformed operator metadata"):
        parse_operator_metadata(b'v1\n{"operatorInfo":{"operatorId":0}}', "state/0/_metadata/metadata")
    with pytest.raises(UnknownFormatVersionError, match="'v3'"):
        parse_operator_metadata(b"v3\n{}", "m")


def test_query_metadata() -> None:
    assert parse_query_metadata(b'{"id":"%s"}\n' % U1.encode(), "metadata") == U1
    with pytest.raises(CorruptFileError, match="no 'id'"):
        parse_query_metadata(b'{"name":"x"}', "metadata")


def test_a_blank_line_among_v2_lines_is_refused_as_spark_refuses_it() -> None:
    """Spark reads every line of a v2 file into its map ("Invalid OffsetMap format" on one without
    `:`); a final newline is no line."""
    good = _v2('orders:{"logOffset":2}', 'returns:{"logOffset":2}', evolution="true")
    assert len(parse_offset(0, good + b"\n", "offsets/0").file_sources) == 2
    with pytest.raises(CorruptFileError, match="blank line"):
        parse_offset(0, good.replace(b"\nreturns", b"\n\nreturns"), "offsets/0")
