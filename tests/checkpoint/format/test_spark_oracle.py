"""The format core agrees with Spark's own readers of the same checkpoints."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import functions as F

from checkpoint.format.changelog import column_family_id
from checkpoint.format.layout import FileKind
from testbed.queries import INPUT_SCHEMA
from testbed.sinks import KILLED_AT_BATCH, RETRY_BATCHES
from tests.support.unsaferow import decode_row, state_value_rows

pytestmark = pytest.mark.slow


def test_state_metadata_source_agrees(spark, loaded, corpus) -> None:
    for name, ckpt in loaded.items():
        rows = spark.read.format("state-metadata").load(str(corpus[name])).collect()
        theirs = sorted(
            (r.operatorId, r.operatorName, r.stateStoreName, r.numPartitions, r.minBatchId, r.maxBatchId)
            for r in rows
        )
        first = min(b.id for b in ckpt.batches.values() if b.committed)
        ours = sorted(
            (op.id, op.name, store, op.num_partitions, first, ckpt.latest_committed_batch)
            for op in ckpt.operators.values()
            for store in op.store_names
        )
        assert ours == theirs, name


JOIN_STORES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)
CHANGE_FEED_CASES = [
    ("long_chain", 0, "default", [0, 15, 31]),
    ("snapshots", 0, "default", [3, 11]),
    ("watermark", 0, "default", list(range(9))),
    ("dedup_agg", 0, "default", [2, 7]),
    ("dedup_agg", 1, "default", [2, 7]),
    ("two_actions", 0, "default", [1, 2]),
    ("task_retry", 0, "default", list(RETRY_BATCHES)),
    ("killed_after_restart", 0, "default", [KILLED_AT_BATCH]),
    ("format_v1", 0, "default", [2]),
    ("zstd", 0, "default", [0, 4]),
    *[("join", 0, store, [1, 4]) for store in JOIN_STORES],
]
_CHANGE = {"put": "update", "delete": "delete"}


@pytest.mark.parametrize(("name", "op", "store", "batches"), CHANGE_FEED_CASES)
def test_changelog_records_equal_spark_change_feed(spark, loaded, corpus, name, op, store, batches) -> None:
    ckpt = loaded[name]
    for batch in batches:
        feed = (
            spark.read.format("statestore")
            .option("readChangeFeed", True)
            .option("changeStartBatchId", batch)
            .option("changeEndBatchId", batch)
            .option("operatorId", op)
            .option("storeName", store)
            .load(str(corpus[name]))
        )
        key_schema, value_schema = feed.schema["key"].dataType, feed.schema["value"].dataType
        theirs = Counter(
            (r.batch_id, r.change_type, r.key, r.value if r.change_type != "delete" else None, r.partition_id)
            for r in feed.collect()
        )
        ours: Counter = Counter()
        for sid, s in ckpt.stores.items():
            if (sid.operator, sid.store) != (op, store):
                continue
            uid = ckpt.committed_unique_id(batch, sid)  # None for format V1
            _, records = ckpt.read_changelog(s.file(FileKind.CHANGELOG, batch + 1, uid))
            for r in records:
                value = None if r.value is None else decode_row(r.value[1:], value_schema)
                ours[(batch, _CHANGE[r.op], decode_row(r.key[1:], key_schema), value, sid.partition)] += 1
        assert sum(theirs.values()) > 0 or name == "watermark", (name, batch)
        assert ours == theirs, (name, store, batch)


def test_list_state_merges_equal_spark_change_feed(spark, loaded, corpus) -> None:
    ckpt = loaded["list_state"]
    zip_file = next(f for f in ckpt.files if f.kind == FileKind.ZIP)
    items_cf = ckpt.read_snapshot(zip_file).metadata.column_family_mapping["items"]
    for batch in (0, 2, 5):
        feed = (
            spark.read.format("statestore")
            .option("readChangeFeed", True)
            .option("changeStartBatchId", batch)
            .option("changeEndBatchId", batch)
            .option("stateVarName", "items")
            .load(str(corpus["list_state"]))
        )
        key_schema, elem_schema = feed.schema["key"].dataType, feed.schema["list_element"].dataType
        theirs = Counter((r.change_type, r.key, r.list_element, r.partition_id) for r in feed.collect())
        ours: Counter = Counter()
        for sid, s in ckpt.stores.items():
            uid = ckpt.committed_unique_id(batch, sid)
            _, records = ckpt.read_changelog(s.file(FileKind.CHANGELOG, batch + 1, uid))
            for r in records:
                if column_family_id(r.key) != items_cf:
                    continue
                key = decode_row(r.key[3:], key_schema)  # 2-byte family id, 1-byte encoding version
                change = {"merge": "append", "put": "update", "delete": "delete"}[r.op]
                for element in state_value_rows(r.value or b"", elem_schema, list_elements=True) or [None]:
                    ours[(change, key, element, sid.partition)] += 1
        assert theirs and ours == theirs, batch


@pytest.mark.parametrize("name", ["long_chain", "killed_after_restart"])
def test_final_state_equals_a_batch_recomputation(spark, corpus, corpus_root, name) -> None:
    """The corpus is what it claims: the state equals a batch query over the same input files."""
    scenario = name.split("_after")[0]
    state = spark.read.format("statestore").load(str(corpus[name]))
    ours = {(r.key.k, *r.value) for r in state.collect()}  # the buffer's fields: count, sum
    inputs = spark.read.schema(INPUT_SCHEMA).json(str(corpus_root / scenario / "input"))
    expected = inputs.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    assert ours == {(r.k, r.n, r.total) for r in expected.collect()}
    assert len(ours) == 9
