"""Cleanup running again and again beside a live query never breaks it."""

from __future__ import annotations

import threading
import time

import pytest

from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.safety import AuditTrail
from testbed.defaults import HDFS as DEFAULT_HDFS
from testbed.queries import FREQUENT_SNAPSHOTS, _keyed_rows, aggregation, write_inputs
from testbed.sinks import _two_actions_sink
from tests.support.planning import apply_unleased, plan_of
from tests.support.state import control_state, latest_state

pytestmark = pytest.mark.slow
FILES = 24


# Spark's defaults (the HDFS-backed store, format V1) with its snapshots as often as the corpus'.
HDFS = {**DEFAULT_HDFS, **FREQUENT_SNAPSHOTS}


# Format V1 has no lost attempts to clean (a re-execution writes the same names): a short window
# makes the deltas and snapshots below it go while the query runs and Spark snapshots beside it.
@pytest.mark.parametrize(
    ("confs", "retain"), [(FREQUENT_SNAPSHOTS, None), (HDFS, 3)], ids=["rocksdb_v2", "hdfs_v1"]
)
def test_live_query_survives_repeated_cleanup(ports, spark, tmp_path, confs, retain) -> None:
    inputs, live_ckpt, control_ckpt = tmp_path / "input", tmp_path / "live", tmp_path / "control"
    write_inputs(inputs, 2, _keyed_rows)
    with ports.confs(confs):
        query = (
            aggregation(spark, {"": str(inputs)})
            .writeStream.outputMode("update")
            .option("checkpointLocation", str(live_ckpt))
            .foreachBatch(_two_actions_sink)  # a second action per batch: superseded files all along
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    def newest_commit() -> int:
        names = (live_ckpt / "commits").glob("[0-9]*") if (live_ckpt / "commits").exists() else ()
        return max((int(p.name) for p in names), default=-1)

    def feed() -> None:
        # One file a batch, each once the query committed the one before: as many batches (and
        # superseded files) however slowly a loaded machine runs the query.
        for b in range(2, FILES):
            before = newest_commit()
            write_inputs(inputs, 1, _keyed_rows, start=b)
            while newest_commit() <= before and time.monotonic() < deadline and query.exception() is None:
                time.sleep(0.1)

    deadline = time.monotonic() + 240
    feeder = threading.Thread(target=feed)
    feeder.start()
    audit = AuditTrail(str(tmp_path / "audit"))
    runs = deleted = 0
    try:
        while (feeder.is_alive() or runs < 5) and time.monotonic() < deadline:
            assert query.exception() is None
            ckpt = load_checkpoint(str(live_ckpt)) if (live_ckpt / "commits").exists() else None
            if ckpt is not None and ckpt.latest_committed_batch is not None:
                # The test sets the clock: no grace at all, so only the live-query rules protect the query.
                plan = plan_of(ckpt.storage, audit, grace_seconds=0, retain_batches=retain,
                               allow_short_grace=True, query_stopped=False)  # fmt: skip
                assert plan.live
                deleted += apply_unleased(plan, ckpt.storage, audit).deleted.files
                runs += 1
            time.sleep(0.3)
        feeder.join()
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert runs >= 5 and deleted > 0

    with ports.confs(confs):  # a format V1 checkpoint's state is read in a V1 session
        live_state = latest_state(spark, live_ckpt, "aggregation")
        assert isinstance(live_state, list) and live_state
        assert live_state == control_state(spark, inputs, control_ckpt, confs)
    # The cleaned checkpoint validates and still plans safely once the query has stopped.
    assert load_checkpoint(str(live_ckpt), strict=False).problems == ()
