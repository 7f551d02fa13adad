"""Source evolution (Spark 4.2+): a query whose sources are named writes offsets v2, a
`name:offset` line per source, and keeps each file source's log in `sources/<name>/`, which a
restart reads as it reads `sources/<i>/` (docs/format.md §10). A fork that took only numbered
folders left those logs behind, and Spark 4.3.0 then refused to restart it ("batch 1 doesn't
exist"); validation did not check them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from checkpoint.analysis.checks import Severity, validate
from checkpoint.format import FileKind
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.head import load_head
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from testbed.queries import INPUT_SCHEMA, _keyed_rows, write_inputs
from tests.support.forking import fork

pytestmark = pytest.mark.slow

EVOLUTION = {"spark.sql.streaming.queryEvolution.enableSourceEvolution": "true"}
NAMES = ("orders", "returns")


def _run(ports, inputs: Path, checkpoint: Path) -> list[tuple]:
    """Both named sources, one file a batch each, counted by key; the rows of the last batch
    (complete mode: every key, its count carried over from the state)."""
    from pyspark.sql import functions as F

    spark = ports.spark
    with ports.confs(EVOLUTION):  # a name is refused without it
        streams = [
            spark.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .name(n)
            .json(str(inputs / n))
            for n in NAMES
        ]
        table = f"named_{uuid.uuid4().hex}"
        query = (
            streams[0].union(streams[1]).groupBy("k").agg(F.count("*").alias("n"))
            .writeStream.format("memory").queryName(table).outputMode("complete")
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
    rows = sorted(tuple(r) for r in spark.table(table).collect())
    spark.catalog.dropTempView(table)
    return rows


@pytest.fixture(scope="module")
def named(ports, tmp_path_factory) -> tuple[Path, Path]:
    """(inputs, checkpoint) of three batches of the named query."""
    top = tmp_path_factory.mktemp("named")
    for n in NAMES:
        write_inputs(top / "in" / n, 3, _keyed_rows)
    _run(ports, top / "in", top / "checkpoint")
    return top / "in", top / "checkpoint"


def test_named_sources_are_read_as_spark_writes_them(named) -> None:
    _, checkpoint = named
    assert (checkpoint / "offsets" / "2").read_text().startswith("v2\n")
    assert sorted(p.name for p in (checkpoint / "sources").iterdir()) == sorted(NAMES)
    logs = [f for f in load_checkpoint(str(checkpoint)).files if f.rel.startswith("sources/")]
    assert {f.kind for f in logs} == {FileKind.SOURCE_LOG, FileKind.HADOOP_CRC}  # nothing unknown
    assert len([f for f in logs if f.kind == FileKind.SOURCE_LOG]) == 2 * 3
    head = load_head(str(checkpoint), strict=True)
    assert head.newest_offsets is not None and head.newest_offsets.named
    assert set(head.newest_offsets.source_keys) == set(NAMES)
    assert [f for f in validate(head).findings if f.severity != Severity.INFO] == []


def test_a_fork_of_named_sources_restarts_as_an_untouched_copy(ports, named, tmp_path) -> None:
    inputs, checkpoint = named
    untouched = copy_checkpoint(checkpoint, tmp_path / "untouched")
    result = fork(Storage(str(checkpoint)), Storage(str(tmp_path / "forked")))
    assert result.batch == 2
    for n in NAMES:
        assert sorted(p.name for p in (tmp_path / "forked" / "sources" / n).iterdir()) == ["0", "1", "2"]
        write_inputs(inputs / n, 1, _keyed_rows, start=3)  # one batch more, read by both
    control = _run(ports, inputs, untouched)
    assert _run(ports, inputs, tmp_path / "forked") == control
    assert sum(n for _, n in control) == 2 * 4 * 12  # the state's three batches and the new one


def test_a_named_source_log_without_its_newest_entry_is_an_error_as_to_spark(ports, named, tmp_path) -> None:
    inputs, checkpoint = named
    damaged = copy_checkpoint(checkpoint, tmp_path / "damaged")
    newest = max((damaged / "sources" / "returns").glob("[0-9]*"), key=lambda p: int(p.name))
    newest.unlink()
    errors = [
        f for f in validate(load_head(str(damaged), strict=False)).findings if f.severity == Severity.ERROR
    ]
    assert [f.code for f in errors] == ["SOURCE_LOG_MISSING"] and "sources/returns" in errors[0].path
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException, match="doesn't exist"):
        _run(ports, inputs, damaged)


def test_the_rehearsal_finds_a_batchs_input_in_each_named_log(named) -> None:
    """Batch 2 read entry 2 of each log (a file a batch): the scratch fork adds them, and checks
    the files they name. By the lines' names, whatever order Spark wrote them in."""
    from checkpoint.fork import source_logs
    from checkpoint.rehearsal.scratch import _batch_logs

    storage = Storage(str(named[1]))
    added, read = _batch_logs(load_head(storage, strict=False, batches=[2]), 2, source_logs(storage, 2))
    assert sorted(f.rel for f in added) == [f"sources/{n}/2" for n in NAMES]
    assert sorted((entry, f.rel) for entry, f in read) == [(2, f"sources/{n}/2") for n in NAMES]
