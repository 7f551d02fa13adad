"""The corpus's sinks, among them the ones that fail on purpose: a task failing its first attempt
after its state commit, a driver killed mid-batch, two actions a batch."""

from __future__ import annotations

import time
from pathlib import Path

# The driver is killed while batch KILLED_AT_BATCH runs, after its state stores committed.
KILLED_AT_BATCH = 3
# The task retry scenario fails partition 0's first attempt in these batches.
RETRY_BATCHES = (1, 3)


def _noop_sink(df, batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()


def _two_actions_sink(df, batch_id: int) -> None:
    # Each action re-executes the stateful plan: every store writes this version twice, under two ids.
    df.count()
    df.write.format("noop").mode("overwrite").save()


def _fail_first_attempt(batch_id: int):
    def consume(rows):
        from pyspark import TaskContext

        list(rows)  # drain first: the state store commits when its iterator is exhausted
        ctx = TaskContext.get()
        if batch_id in RETRY_BATCHES and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            raise RuntimeError("corpus: injected failure after the state commit")

    return consume


def _retry_sink(df, batch_id: int) -> None:
    df.foreachPartition(_fail_first_attempt(batch_id))


def _killing_sink(marker: Path, at: int = KILLED_AT_BATCH):
    def sink(df, batch_id: int) -> None:
        _noop_sink(df, batch_id)
        if batch_id == at:
            # The batch's state is committed on every partition; the commit log is not written yet.
            marker.write_text(str(batch_id))
            time.sleep(3600)

    return sink
