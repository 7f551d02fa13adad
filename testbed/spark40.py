"""Checkpoints written by PySpark 4.0, the first release line with checkpoint format V2, for the
tests that prove this release refuses to write into them (safety.md: write only what the
checkpoint's own Spark reads).

Runs in a virtualenv of its own with PySpark 4.0.5 (`ensure_spark40`, cached beside the corpus
like the s3a jars), so it imports nothing of this project: `python spark40.py OUT_DIR`.
Two queries, each reading one JSON file per micro-batch: an aggregation whose maintenance never
runs (a delta-only chain from version 1, the case that broke under 4.0) and one with maintenance
every second (Spark 4.0's own snapshots).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SPARK40 = "4.0.5"
GENERATOR_VERSION = 1
BATCHES = 12


def _inputs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for b in range(BATCHES):
        rows = [{"k": f"k{(b * 12 + j) * 7 % 9:02d}", "v": j % 5} for j in range(12)]
        (folder / f"part-{b:05d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


# name -> (maintenance interval, minDeltasForSnapshot). Each runs in a JVM of its own: an
# executor's maintenance thread keeps the interval of the first query that started it.
SCENARIOS = {"delta_only": ("1h", "1000"), "snapshots": ("1s", "2")}


def _run(out: Path, name: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    interval, min_deltas = SCENARIOS[name]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ckpt-spark40")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", interval)
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", min_deltas)
        .getOrCreate()
    )  # fmt: skip
    _inputs(out / "input")
    counts = (
        spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(out / "input"))
        .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
    )  # fmt: skip
    writer = counts.writeStream.outputMode("update").format("noop")
    writer = writer.option("checkpointLocation", str(out / name / "checkpoint"))
    if name == "delta_only":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        # Maintenance runs only while the query does: batches half a second apart, then a few
        # maintenance rounds after the last one, so Spark 4.0 uploads snapshots of its own.
        query = writer.trigger(processingTime="500 milliseconds").start()
        deadline = time.monotonic() + 300
        while (query.lastProgress or {}).get("batchId", -1) < BATCHES - 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(4)
        query.stop()
    spark.stop()


def ensure_spark40(cache: Path) -> Path:
    """The 4.0 checkpoints under `cache`, generated once per generator version: a virtualenv with
    PySpark 4.0.5 from PyPI (one ~430 MB download), then this script in it."""
    done = cache / f"spark40-v{GENERATOR_VERSION}"
    if (done / "ok").exists():
        return done
    venv = cache / f"pyspark-{SPARK40}"
    python = venv / "bin" / "python"
    if not (venv / "ok").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pyspark=={SPARK40}"], check=True)
        (venv / "ok").write_text(SPARK40)
    work = cache / f"spark40-v{GENERATOR_VERSION}.partial"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_HOME", "PYTHONPATH")}
    for name in SCENARIOS:
        subprocess.run([str(python), __file__, str(work), name], check=True, env=env, timeout=900)
    (work / "ok").write_text(SPARK40)
    work.rename(done)
    return done


if __name__ == "__main__":
    _run(Path(sys.argv[1]), sys.argv[2])
