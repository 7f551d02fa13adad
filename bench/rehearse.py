"""Benchmark: a restart rehearsal against one plain restart of the same query on a copy, in the
same Spark session.

An aggregation run by PySpark for `--batches` batches (4 partitions, Spark's defaults: the
HDFS-backed store, a snapshot every 10 deltas, 100 batches of logs retained), then, alternately,
best of `--repeat`:
- plain: the whole checkpoint copied (shutil.copytree), and the query restarted there on one new
  input file, once (the `noop` sink): what a person does by hand to try a restart;
- rehearsal: `checkpoint.rehearsal.rehearse` in this process (the scratch fork at N-1 with N
  planned, the query replaying N, every store read on both sides and compared).
Also: the files and bytes each copies.

    python -m bench.rehearse [--batches 150] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from checkpoint.rehearsal import Outcome, RehearsalOptions, rehearse
from checkpoint.safety import InPlace, taken_at_once
from checkpoint.storage import Storage

_INPUT = "BENCH_REHEARSAL_INPUT"


def query(spark):
    """The scenario's aggregation, as a deployment's `--query` function returns it."""
    from testbed.queries import aggregation

    return aggregation(spark, {"": os.environ[_INPUT]}, 1).writeStream.outputMode("update")


def _plain(spark, src: Path, inputs: Path, work: Path, i: int) -> tuple[float, int, int]:
    from testbed.queries import _keyed_rows, write_inputs

    copy = work / f"plain-{i}"
    started = time.perf_counter()
    shutil.copytree(src, copy)
    copied = [p.stat().st_size for p in copy.rglob("*") if p.is_file()]  # before Spark's maintenance
    extra = work / f"extra-{i}"
    write_inputs(extra, 1, _keyed_rows, start=10_000 + i)
    os.environ[_INPUT] = "/{" + str(inputs).lstrip("/") + "," + str(extra).lstrip("/") + "}"
    restarted = query(spark).format("noop").trigger(once=True).option("checkpointLocation", str(copy)).start()
    restarted.awaitTermination()
    seconds = time.perf_counter() - started
    shutil.rmtree(copy)
    return seconds, len(copied), sum(copied)


def _rehearsal(spark, src: Path, inputs: Path, work: Path) -> tuple[float, dict]:
    from jobs.rehearse import in_process

    os.environ[_INPUT] = str(inputs)
    started = time.perf_counter()
    options = RehearsalOptions(in_process(lambda: spark), f"{__name__}:query", scratch_dir=str(work))
    result = rehearse(InPlace(Storage(str(src)), taken_at_once("bench")), options)
    assert result.outcome == Outcome.EQUAL, result.as_dict()
    return time.perf_counter() - started, result.as_dict()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args(argv)

    from jobs.spark_session import local_session
    from testbed.queries import aggregation
    from testbed.scenarios import Scenario

    work = Path(tempfile.mkdtemp(prefix="bench-rehearse-", dir=args.dir))
    spark = local_session(master="local[2]", app_name="bench-rehearse")
    scenario = Scenario("history", "aggregation with Spark's defaults", aggregation, args.batches, {})
    scenario.build(spark, work / "real")
    src, inputs = work / "real" / "checkpoint", work / "real" / "input"
    plain, rehearsal, doc = [], [], {}
    for i in range(args.repeat):
        seconds, files, size = _plain(spark, src, inputs, work, i)
        plain.append(seconds)
        seconds, doc = _rehearsal(spark, src, inputs, work)
        rehearsal.append(seconds)
    row = {
        "batches": args.batches,
        "plain_seconds": round(min(plain), 2),
        "rehearsal_seconds": round(min(rehearsal), 2),
        "ratio": round(min(rehearsal) / min(plain), 3),
        "rehearsal_parts": doc["seconds"],
        "plain_files": files,
        "plain_bytes": size,
        "rehearsal_files": doc["fork_files"],
        "rehearsal_bytes": doc["fork_bytes"],
    }
    print(json.dumps(row, indent=2))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
