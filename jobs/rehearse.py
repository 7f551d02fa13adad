"""The Spark side of a restart rehearsal (`checkpoint/rehearsal/flow.py` is the flow): the user's
query started on the scratch fork with a sink that writes nothing, stopped after the one batch it
replays, and each store read back by Spark's state data source beside the original's.

Run in this process (`in_process`), or in another Python with another PySpark (`in_python`), which
runs this module:

    PYTHON -m jobs.rehearse JOB.json ANSWER.json
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoint.errors import RehearsalRefused
from checkpoint.rehearsal import SparkRun
from checkpoint.storage import Storage

from .spark_session import another_python_env, reach, scoped_confs

_KEYS_SHOWN = 5
_RAISED = re.compile(r"^[\w.]*(Error|Exception)\b")


def load_query(spec: str) -> Callable:
    """`MODULE:FUNCTION`, imported as `python -m` would (the working folder first on the path)."""
    module, _, name = spec.partition(":")
    if not module or not name.isidentifier():
        raise RehearsalRefused(f"--query {spec!r}: expected MODULE:FUNCTION")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise RehearsalRefused(f"--query {spec}: {exc}") from exc
    if not callable(function):
        raise RehearsalRefused(f"--query {spec}: not a function")
    return function


def rehearse_on(spark, job: dict[str, Any]) -> dict[str, Any]:
    """Runs `job` (`checkpoint.rehearsal.job_for`) on `spark`; the answer is plain values."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    query = load_query(job["query"])
    answer: dict[str, Any] = {"spark_version": spark.version, "error": None, "stores": [], "committed": False}
    # Spark skips a file its source log names and no longer finds (a missing root path of its
    # listing is no error): the replay would read nothing, and look like a change of the code.
    answer["input_gone"] = _gone(spark, job["inputs"])
    if answer["input_gone"]:
        return answer
    with scoped_confs(spark, job["conf"]):
        writer = query(spark)
        if not hasattr(writer, "trigger") or not hasattr(writer, "start"):
            raise RehearsalRefused(f"--query {job['query']} returned {type(writer).__name__}, not a "
                                   "DataStreamWriter (df.writeStream...)")  # fmt: skip
        # Read after the function ran: it may set confs on the session as the deployment does.
        answer["session_conf"] = {k: _session_value(spark, k) for k in job["pinned"]}
        # `noop` replaces any sink, foreachBatch and foreach included: no sink code runs. Once: the
        # planned batch, replayed from its recorded offsets, and nothing after it.
        writer = writer.format("noop").trigger(once=True).option("checkpointLocation", job["scratch"])
        # Spark logs a failed query's stack at ERROR: the refusal is the answer, reported in words.
        level = _log_level(spark)
        spark.sparkContext.setLogLevel("OFF")
        try:
            started = writer.start()
            started.awaitTermination()
        except (PySparkException, Py4JJavaError) as exc:  # what Spark raised: the answer
            answer["error"] = _named(exc)
        finally:
            spark.sparkContext.setLogLevel(level)
    scratch = Storage(job["scratch"].removeprefix("file:"))  # local: the flow makes it so
    answer["committed"] = answer["error"] is None and scratch.stat(f"commits/{job['batch']}") is not None
    if answer["committed"]:
        try:
            with scoped_confs(spark, job["read_conf"]):
                answer["stores"] = [_compare(spark, job, op, store) for op, store in job["stores"]]
        except (PySparkException, Py4JJavaError) as exc:  # this Spark's reader cannot read the state
            answer["compare_error"] = _named(exc)
    return answer


def _gone(spark, paths: list[str]) -> list[str]:
    """The files of `paths` that Spark's own file systems do not find, as its file source names them."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no driver JVM on this side to ask; the replay shows it
        return []
    from py4j.protocol import Py4JJavaError

    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    missing = []
    for path in paths:
        try:
            located = jvm.org.apache.hadoop.fs.Path(jvm.java.net.URI(path))
            found = located.getFileSystem(hadoop).exists(located)
        except Py4JJavaError:  # a name no file system of Spark's takes: its source cannot read it either
            found = False
        if not found:
            missing.append(path)
    return missing


def _log_level(spark) -> str:
    """The root logger's level now, to set back (PySpark sets levels and reads none)."""
    try:
        return str(spark._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().toString())
    except Exception:  # no log4j 2 on this side: Spark's own default for a session
        return "WARN"


def _session_value(spark, key: str) -> str | None:
    """The value the session would run with: its own, else the conf's default (`get(key, None)`
    would give None for a conf left at its default)."""
    try:
        return spark.conf.get(key)
    except Exception:  # a conf this Spark does not know, and the session does not set
        return None


def _named(exc: BaseException) -> dict[str, str | None]:
    condition = None
    for get in ("getCondition", "getErrorClass"):
        try:
            condition = getattr(exc, get)()
        except Exception:  # an older PySpark, or an exception without one: the message names it
            continue
        if condition:
            break
    # PySpark's own exception keeps the JVM's chain apart: its causes say what an uncategorized
    # failure was (a state store load's AUTO_SNAPSHOT_REPAIR_FAILED under CANNOT_LOAD_STATE_STORE).
    causes = [line for line in str(getattr(exc, "_stackTrace", "") or "").splitlines()
              if line.startswith("Caused by: ")]  # fmt: skip
    return {"condition": condition, "message": "\n".join([str(exc), *causes])}


def _load(spark, url: str, job: dict, operator: int, store: str):
    load = spark.read.format("statestore").option("batchId", job["batch"]).option("operatorId", operator)
    load = load.option("storeName", store)
    return load.options(**job["reader_options"]).load(url)


def _compare(spark, job: dict, operator: int, store: str) -> dict[str, Any]:
    """Both sides' rows as multisets of (column family, key bytes, value bytes): every byte counts,
    their order and placement do not. The HDFS-backed store, and a Spark without
    `_readAllColumnFamilies`, give key and value as rows, compared as JSON. One pass: each distinct
    row counted on each side (the original +1, the replay -1); a second only when some differ."""
    from pyspark.sql import functions as F

    sides = [_load(spark, job[side], job, operator, store) for side in ("original", "scratch")]
    if "key_bytes" in sides[0].columns:
        identity = [F.col("column_family_name"), F.col("key_bytes"), F.col("value_bytes")]
        shown = F.to_json(F.struct("partition_key"))
    else:
        identity = [F.to_json(F.col("key")), F.to_json(F.col("value"))]
        shown = F.to_json(F.col("key"))
    names = [f"c{i}" for i in range(len(identity))]
    tagged = [
        s.select(*(c.alias(n) for c, n in zip(identity, names, strict=True)), shown.alias("shown"),
                 F.lit(sign).alias("side"))
        for s, sign in zip(sides, (1, -1), strict=True)
    ]  # fmt: skip
    original = F.when(F.col("side") > 0, 1).otherwise(0)
    rows = tagged[0].unionByName(tagged[1]).groupBy(*names)
    rows = rows.agg(F.sum("side").alias("d"), F.sum(original).alias("a"), F.count(F.lit(1)).alias("n"),
                    F.first("shown").alias("shown"))  # fmt: skip

    def total(column) -> Any:
        return F.coalesce(F.sum(column), F.lit(0))

    got = rows.agg(total("a").alias("original"), total("n").alias("both"),
                   total(F.greatest(F.col("d"), F.lit(0))).alias("only_original"),
                   total(F.greatest(-F.col("d"), F.lit(0))).alias("only_rehearsal")).first()  # fmt: skip
    keys: list[str] = []
    if got["only_original"] or got["only_rehearsal"]:
        differing = rows.where(F.col("d") != 0).select("shown").distinct().limit(_KEYS_SHOWN)
        keys = sorted(r["shown"] for r in differing.collect())
    return {
        "operator": operator,
        "store": store,
        "original_rows": int(got["original"]),
        "rehearsal_rows": int(got["both"] - got["original"]),
        "only_original": int(got["only_original"]),
        "only_rehearsal": int(got["only_rehearsal"]),
        "keys": keys,
    }


def in_process(session: Callable[[], Any], original: Storage | None = None) -> SparkRun:
    """The port on a session of this process, started only when a job comes; it reaches the
    original's bucket as the storage does (`reach`), to read its state."""

    def run(job: dict[str, Any]) -> dict[str, Any]:
        spark = session()
        if original is not None:
            reach(spark, original)
        return rehearse_on(spark, job)

    return run


def in_python(python: str, master: str) -> SparkRun:
    """The port on another interpreter (another PySpark: an upgrade or a rollback). It imports this
    project from the source tree it runs from, and needs the project's dependencies installed."""

    def run(job: dict[str, Any]) -> dict[str, Any]:
        env = another_python_env()  # the user's own PYTHONPATH kept: their query's modules
        with tempfile.TemporaryDirectory(prefix="ckpt-rehearsal-job-") as folder:
            asked, answered = Path(folder) / "job.json", Path(folder) / "answer.json"
            asked.write_text(json.dumps({**job, "master": master}))
            done = subprocess.run([python, "-m", "jobs.rehearse", str(asked), str(answered)], env=env,
                                  capture_output=True, text=True)  # fmt: skip
            if done.returncode != 0 or not answered.exists():
                lines = (done.stderr or done.stdout).strip().splitlines()
                # The exception's own line, not the last frame of a Java stack under it
                raised = [line for line in lines if _RAISED.match(line)]
                tail = (raised or lines)[-1:] or ["no output"]
                raise RehearsalRefused(f"the rehearsal under {python} failed (exit {done.returncode}): "
                                       f"{tail[0]}")  # fmt: skip
            return json.loads(answered.read_text())

    return run


def main(argv: list[str] | None = None) -> None:
    from .spark_session import session_for

    asked, answered = argv if argv is not None else sys.argv[1:]
    job = json.loads(Path(asked).read_text())
    answer = rehearse_on(session_for(job.pop("master")), job)
    Path(answered).write_text(json.dumps(answer))


if __name__ == "__main__":
    main()
