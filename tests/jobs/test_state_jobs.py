"""The Spark side of migration and repartition alone: stores written side by side stop once one
failed, a Spark Connect session writes them in this process, the digest both proofs compare is the
exact sum a decimal sum gives, and the repartition's fast state read digests what Spark's default
read does."""

from __future__ import annotations

import time
import types

import pytest


class _LocalContext:
    """A SparkContext as `jobs.per_store` uses one, running each one-task job in this process."""

    defaultParallelism = 2

    def setJobDescription(self, _: str) -> None:
        pass

    def setLocalProperty(self, *_: str) -> None:
        pass

    def parallelize(self, items: list, _: int):
        class Rdd:
            def map(self, f):
                self.f = f
                return self

            def collect(self):
                return [self.f(item) for item in items]

        return Rdd()


def test_stores_written_side_by_side_start_no_store_once_one_failed() -> None:
    """Two stores at a time (`jobs.per_store`, migration's policy): the first fails while the
    second is being written. The second is finished and handed on, no later store starts, and
    the failure is raised once none runs."""
    import threading

    from checkpoint.errors import MigrationFailed
    from jobs.migrate import SparkStoreWriter

    started, second_started, first_failed = [], threading.Event(), threading.Event()

    class Job:
        def __init__(self, n: int):
            self.n = n
            self.entry = types.SimpleNamespace(store=f"store {n}")
            self.target = types.SimpleNamespace(storage=types.SimpleNamespace(url="file:///dest"))

        def to_ship(self):
            return self

        def run(self) -> tuple[str, int]:  # a task's `str` says why its store failed
            started.append(self.n)
            if self.n == 0:
                assert second_started.wait(10)
                first_failed.set()
                raise MigrationFailed("store 0 failed")
            second_started.set()
            assert first_failed.wait(10)
            time.sleep(0.2)  # the failure is recorded before this job ends
            return ("written", self.n)

    spark = types.SimpleNamespace(sparkContext=_LocalContext())
    out = []
    with pytest.raises(MigrationFailed, match="store 0 failed"):
        for written in SparkStoreWriter(spark)([Job(n) for n in range(6)], lambda: None):
            out.append(written)
    assert out == [("written", 1)] and sorted(started) == [0, 1]


def test_a_spark_connect_session_has_the_stores_written_in_this_process() -> None:
    """A Spark Connect session has no SparkContext to start Python tasks with: the writer says so
    and writes every store here, in order."""
    from jobs.migrate import SparkStoreWriter

    class Connect:  # as PySpark's remote session answers
        def __getattr__(self, name):
            raise AttributeError(f"[JVM_ATTRIBUTE_NOT_SUPPORTED] {name}")

    class Job:
        def __init__(self, n: int):
            self.n = n

        def run(self) -> str:
            return f"written {self.n}"

    checked = []
    written = SparkStoreWriter(Connect())([Job(n) for n in range(3)], lambda: checked.append(1))
    assert list(written) == ["written 0", "written 1", "written 2"] and len(checked) == 3


def test_the_digest_sums_exactly_what_a_decimal_sum_gives(spark) -> None:
    """The digest's xxhash64 sum, taken as two long sums of its halves, is the exact sum a decimal
    sum gives, negative hashes and all; and an empty side digests as zero."""
    from pyspark.sql import functions as F

    from jobs.repartition import digest_aggregates, digest_of

    rows = spark.range(20_000).select(F.struct((F.col("id") * 7919).alias("k")).alias("key"),
                                      F.struct((F.col("id") % 13).alias("v")).alias("value"))  # fmt: skip
    ours = rows.agg(*digest_aggregates("key", "value")).first()
    exact = rows.agg(F.sum(F.xxhash64("key", "value").cast("decimal(38,0)")).alias("a"),
                     F.sum(F.hash("key", "value").cast("decimal(38,0)")).alias("b"),
                     F.min(F.xxhash64("key", "value")).alias("low")).first()  # fmt: skip
    assert exact["low"] < 0
    assert digest_of(ours) == f"{exact['a']}:{exact['b']}"
    assert digest_of(rows.where("false").agg(*digest_aggregates("key", "value")).first()) == "0:0"


def test_the_fast_state_read_digests_what_the_default_read_does(spark, corpus, monkeypatch) -> None:
    """The digests read with RocksDB's row tracking off (half the load time) equal those of
    Spark's default read, and the session's confs are as they were afterwards."""
    import jobs.repartition as jobs_repartition
    from checkpoint.model import load_head
    from checkpoint.repartition import state_readers
    from checkpoint.storage import Storage

    track = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
    ckpt_ = load_head(str(corpus["long_chain"]))  # a replay chain of 32 changelogs per store
    args = (spark, Storage(str(corpus["long_chain"])).spark_url, ckpt_.latest_committed_batch,
            state_readers(ckpt_), 4)  # fmt: skip
    before = spark.conf.get(track, None)
    fast = jobs_repartition.digest_state(*args)
    assert spark.conf.get(track, None) == before
    monkeypatch.setattr(jobs_repartition, "_FAST_READ", {track: "true"})
    default = jobs_repartition.digest_state(*args)
    assert fast == default and all(d.rows > 0 for d in fast)
