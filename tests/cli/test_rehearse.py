"""`ckpt rehearse`: real queries replay a committed batch on a scratch fork, through the CLI, and
Spark's own checks answer; the checkpoint rehearsed on is never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint.rehearsal import CONDITIONS, Outcome
from cli.main import main
from testbed.copying import copy_checkpoint
from testbed.restart import latest_batch
from tests.support.files import files_of
from tests.support.rehearsal import INPUT, QUERIES, rehearsed


@pytest.fixture
def private(tmp_path):
    """A private copy of a scenario's checkpoint (its input stays where the scenario wrote it), and
    what it holds: what every rehearsal must leave as it was."""

    def copy(checkpoint: Path) -> tuple[Path, dict]:
        dst = tmp_path / "checkpoint"
        copy_checkpoint(checkpoint, dst)
        return dst, files_of(dst)

    return copy


@pytest.mark.parametrize("which, name", [("defaults", "hdfs_agg"), ("defaults", "rocksdb_v1_changelog"),
                                         ("corpus", "long_chain")])  # fmt: skip
def test_unchanged_code_under_the_same_spark_replays_to_equal_state(
    request, spark, private, capsys, monkeypatch, which, name
) -> None:
    """On every format: equal state, exit 0. The query's own sink never runs (it fails if it does),
    and the function takes the checkpoint's lease while Spark runs: the rehearsal holds it only
    while it copies."""
    source = request.getfixturevalue(which)[name]
    checkpoint, before = private(source)
    scratch_dir = checkpoint.parent / "not" / "yet"  # made as `mkdir -p` would, and left empty
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, source.parent / "input", "lease_taken",
                          "--scratch-dir", str(scratch_dir))  # fmt: skip
    assert (code, doc["outcome"], doc["error"]) == (0, Outcome.EQUAL, None), doc
    assert scratch_dir.is_dir() and not any(scratch_dir.iterdir())
    assert doc["batch"] == latest_batch(checkpoint) and doc["restarts"] and doc["stores"]
    assert all(s["original_rows"] == s["rehearsal_rows"] > 0 and not s["keys"] for s in doc["stores"])
    assert doc["max_header_fraction"] is not None and doc["spark_version"] == spark.version
    assert not Path(doc["scratch"]).exists()
    assert files_of(checkpoint) == before


def test_a_grouping_key_of_another_type_is_spark_schema_error_with_its_remedy(
    spark, corpus, private, capsys, monkeypatch
) -> None:
    checkpoint, before = private(corpus["long_chain"])
    code, doc = rehearsed(
        capsys, monkeypatch, checkpoint, corpus["long_chain"].parent / "input", "key_type_changed"
    )
    assert (code, doc["outcome"], doc["restarts"]) == (1, Outcome.SPARK_REFUSED, False)
    error = doc["error"]
    assert error["condition"] == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert (error["cause"], error["remedy"]) == CONDITIONS["STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"]
    assert (
        error["message"].startswith("[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]")
        and "\n" not in error["message"]
    )
    assert files_of(checkpoint) == before


@pytest.mark.parametrize("name, query", [("long_chain", "dedup_added"), ("dedup_agg", "dedup_removed")])
def test_a_stateful_operator_added_or_removed_is_named(
    spark, corpus, private, capsys, monkeypatch, name, query
):
    checkpoint, before = private(corpus[name])
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, corpus[name].parent / "input", query)
    assert (code, doc["outcome"]) == (1, Outcome.SPARK_REFUSED)
    assert doc["error"]["condition"] == "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"
    assert files_of(checkpoint) == before


def test_transform_with_state_in_another_output_mode_is_named(spark, corpus, private, capsys, monkeypatch):
    checkpoint, before = private(corpus["list_state"])
    inputs = corpus["list_state"].parent / "input"
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "list_state")
    assert (code, doc["outcome"]) == (0, Outcome.EQUAL), doc
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "list_state_append")
    assert (code, doc["outcome"]) == (1, Outcome.SPARK_REFUSED)
    assert doc["error"]["condition"] == "STATE_STORE_INVALID_CONFIG_AFTER_RESTART"
    assert "outputMode from Update to Append" in doc["error"]["message"]
    assert files_of(checkpoint) == before


def test_a_changed_filter_is_a_state_difference_in_rows_and_a_pinned_conf_is_reported(
    spark, corpus, private, capsys, monkeypatch
) -> None:
    """Not an error: the query restarts, and the rows that differ are counted and a few keys shown.
    A conf the deployment sets otherwise than the checkpoint pins is reported with the pinned value,
    which Spark uses."""
    checkpoint, before = private(corpus["long_chain"])
    pinned = json.loads((checkpoint / "offsets" / "31").read_text().splitlines()[1])["conf"]
    other = str(int(pinned["spark.sql.shuffle.partitions"]) + 3)
    inputs = corpus["long_chain"].parent / "input"
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "filter_changed", "--batch", "31",
                          "--conf", f"spark.sql.shuffle.partitions={other}")  # fmt: skip
    assert (code, doc["outcome"], doc["error"], doc["restarts"]) == (1, Outcome.STATE_DIFFERS, None, True)
    [store] = doc["stores"]
    assert store["only_original"] == store["only_rehearsal"] > 0
    assert store["keys"] and all(json.loads(k)["partition_key"]["k"].startswith("k") for k in store["keys"])
    assert {"key": "spark.sql.shuffle.partitions", "pinned": pinned["spark.sql.shuffle.partitions"],
            "session": other} in doc["pinned"]  # fmt: skip
    assert files_of(checkpoint) == before


def test_the_input_of_the_batch_deleted_is_a_one_line_result(spark, corpus, private, capsys, monkeypatch):
    """Spark itself skips a file its source log names and no longer finds, and would replay the
    batch over nothing: the rehearsal says the input is gone instead, in one line."""
    checkpoint, _ = private(corpus["long_chain"])
    log = checkpoint / "sources" / "0" / "31"
    gone = Path(json.loads(log.read_text().splitlines()[1])["path"].removeprefix("file://")).name
    log.write_text(log.read_text().replace(gone, "deleted-by-retention.json"))
    before = files_of(checkpoint)
    inputs = corpus["long_chain"].parent / "input"
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "aggregation")
    assert (code, doc["outcome"], doc["input_gone"], doc["inputs"]) == (1, Outcome.INPUT_GONE, 1, 1)
    assert doc["input_gone_shown"][0].endswith("/deleted-by-retention.json") and not doc["stores"]
    assert doc["pinned"] == [] and doc["error"] is None  # the query never started
    monkeypatch.setenv(INPUT, str(inputs))
    assert main(["rehearse", str(checkpoint), "--query", f"{QUERIES}:aggregation"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("the source no longer holds the batch's input: 1 of the 1 files batch 31 read "
                          f"are gone (first: {doc['input_gone_shown'][0]})")  # fmt: skip
    assert files_of(checkpoint) == before


def test_an_s3_checkpoint_is_rehearsed_on_a_local_scratch_and_only_read(s3, s3_copy_of, spark, corpus, capsys,
                                                                     monkeypatch) -> None:  # fmt: skip
    """The scratch fork is local; Spark reads the original's state on S3 through s3a, at the endpoint
    the storage reaches the bucket by; nothing inside the checkpoint is written (its lease lives
    beside it)."""
    server, proxy, bucket = s3
    url = s3_copy_of("long_chain")
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    listing = server.filesystem().find
    before = listing(url)
    # The credentials, as a deployment gives its Spark's s3a its own (this JVM may have started
    # before the session fixture put them in the environment).
    hadoop, prefix = spark.sparkContext._jsc.hadoopConfiguration(), f"fs.s3a.bucket.{bucket}."
    given = {"access.key": server.access_key, "secret.key": server.secret_key,
             "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}  # fmt: skip
    kept = {key: hadoop.get(prefix + key) for key in given}
    for key, value in given.items():
        hadoop.set(prefix + key, value)
    proxy.reset()
    try:
        code, doc = rehearsed(capsys, monkeypatch, url, corpus["long_chain"].parent / "input", "aggregation")
    finally:
        for key, value in kept.items():
            hadoop.unset(prefix + key) if value is None else hadoop.set(prefix + key, value)
    assert (code, doc["outcome"]) == (0, Outcome.EQUAL), doc
    assert doc["scratch"].startswith("/") and doc["stores"][0]["original_rows"] > 0
    root = url[len("s3://") :]
    written = {
        r.path for r in proxy.requests if r.op in ("PutObject", "DeleteObject", "DeleteObjects", "CopyObject")
    }
    assert not [p for p in written if p.lstrip("/").startswith(root + "/")], written
    assert listing(url) == before


def test_refusals_come_before_anything_is_copied(corpus, private, capsys, monkeypatch) -> None:
    checkpoint, before = private(corpus["long_chain"])
    inputs = corpus["long_chain"].parent / "input"
    for batch, why in (("0", "batch 0 has no state before it"), ("99", "batch 99 is not a committed batch")):
        code = main(["rehearse", str(checkpoint), "--query", f"{QUERIES}:aggregation", "--batch", batch])
        assert code == 2 and why in capsys.readouterr().err
    assert files_of(checkpoint) == before
    with pytest.raises(SystemExit):
        rehearsed(capsys, monkeypatch, checkpoint, inputs, "aggregation", "--conf", "no-equals-sign")


def test_after_a_no_data_batch_the_input_is_found_by_the_sources_own_count(
    spark, corpus, private, capsys, monkeypatch
):
    """A file source's log counts its own entries, and a no-data batch adds none: after the corpus'
    windowed aggregation ran its watermark's no-data batch, a restart with one more file ran a
    batch N that read entry N-1. Its input gone, the rehearsal of N says so and never starts the
    query: it used to look for entry N, found nothing to read, and let Spark replay N over nothing."""
    from testbed.restart import restart

    checkpoint, _ = private(corpus["watermark"])
    restart(spark, "watermark", corpus["watermark"].parent, checkpoint, checkpoint.parent / "extra", False)
    offsets = {b: json.loads((checkpoint / "offsets" / str(b)).read_text().splitlines()[2])["logOffset"]
               for b in range(latest_batch(checkpoint) + 1)}  # fmt: skip
    n = next(b for b in sorted(offsets) if b and offsets[b - 1] < offsets[b] < b)
    log = checkpoint / "sources" / "0" / str(offsets[n])
    read = [json.loads(line)["path"].removeprefix("file://") for line in log.read_text().splitlines()[1:]]
    assert len(read) == 1 and not (checkpoint / "sources" / "0" / str(n)).exists()
    Path(read[0]).unlink()
    before = files_of(checkpoint)
    inputs = corpus["watermark"].parent / "input"
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "aggregation", "--batch", str(n))
    assert (code, doc["outcome"], doc["input_gone"], doc["inputs"]) == (1, Outcome.INPUT_GONE, 1, 1)
    assert doc["input_gone_shown"] == [f"file://{read[0]}"] and doc["error"] is None
    assert files_of(checkpoint) == before
