"""A rehearsal's verdict (`checkpoint.rehearsal.verdict`): the Spark error condition that says why,
found inside the query's failure, and the pinned confs that differ. The rehearsals themselves run
through `ckpt rehearse`: tests/cli/test_rehearse.py and test_rehearsal_boundary.py."""

from __future__ import annotations

import pytest

from checkpoint.rehearsal import CONDITIONS, SparkError
from checkpoint.rehearsal.verdict import pinned_differences


@pytest.mark.unit
def test_the_condition_that_says_why_is_found_inside_the_query_failure() -> None:
    wrapped = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [STATE_STORE_KEY_"
               "SCHEMA_NOT_COMPATIBLE] Provided key schema does not match.\nat Foo")  # fmt: skip
    error = SparkError.of("STREAM_FAILED", wrapped)
    assert error.condition == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert error.message == "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match."
    sub = SparkError.of(None, "[CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS] gone")
    assert (sub.condition, sub.remedy) == ("CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS",
                                           CONDITIONS["CANNOT_LOAD_STATE_STORE"][1])  # fmt: skip
    # An uncategorized load failure: its cause says why, unless no cause is one the table knows.
    chain = (
        "[STREAM_FAILED] ... [CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred during loading."
        "\nCaused by: org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE.AUTO_SNAPSHOT_REPAIR_"
        "FAILED] Failed to load snapshot version 4\nCaused by: java.lang.IllegalStateException: lineage"
    )
    repair = SparkError.of("STREAM_FAILED", chain)
    assert repair.condition == "CANNOT_LOAD_STATE_STORE.AUTO_SNAPSHOT_REPAIR_FAILED"
    assert repair.message.endswith("Failed to load snapshot version 4")
    alone = SparkError.of("STREAM_FAILED", chain.split("\n")[0] + "\nCaused by: java.io.IOException: x")
    assert alone.condition == "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED"
    unknown = SparkError.of(None, "[SOMETHING_NEW] words")
    assert (unknown.condition, unknown.remedy) == ("SOMETHING_NEW", "see Spark's message")
    assert SparkError.of(None, "[KAFKA_DATA_LOSS.START_OFFSET_RESET] lost").input_gone
    assert pinned_differences({"a": "1", "b": "2"}, {"a": "1", "b": "3"})[0].session == "3"
