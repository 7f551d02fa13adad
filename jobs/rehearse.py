"""The Spark side of a restart rehearsal (`checkpoint/rehearsal/flow.py` is the flow): the user's
query started on the scratch fork with a sink that writes nothing, stopped after the one batch it
replays, and each store read back by Spark's state data source beside the original's.

Run in this process (`in_process`), or in another Python with another PySpark (`in_python`), which
runs this module:

    PYTHON -m jobs.rehearse JOB.json ANSWER.json
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checkpoint.errors import RehearsalRefused
from checkpoint.rehearsal import SparkRun
from checkpoint.storage import Storage

from .spark_session import another_python_env, reach, scoped_confs

log = logging.getLogger(__name__)
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
    """Runs `job` (`checkpoint.rehearsal.job_for`) on `spark`; the answer is plain values.

    The user's function is the one part of the rehearsal that is not ours, and it runs behind a
    boundary: on a thread of its own with the job's deadline, and for as long as the rehearsal
    runs, `DataStreamWriter.start` and `toTable` are refused to every thread but the rehearsal's
    own start (many deployments' `main` starts its query and waits on it, which would run the
    production sink on the production checkpoint), and from the threads the function started ever
    after. What it raises, a `SystemExit` included, a query it started anyway (past PySpark's writer:
    a listener sees every query this session starts), and a deadline passed are answers
    (`answer["code"]`, `answer["timed_out"]`), never an exception of this function. Whatever query
    is running afterwards that was not before is stopped, and named."""
    seen: list[str] = []
    listener = _starts_seen(spark, seen)
    ours: list[str] = []
    with _GUARD.lock:
        _GUARD.armed += 1
        _GUARD.starts = []
    try:
        answer = _rehearse(spark, job, ours)
    finally:
        with _GUARD.lock:
            _GUARD.armed -= 1
        _forget(spark, listener)
    with _GUARD.lock:
        refused = list(_GUARD.starts)
    if refused and "code" not in answer:  # a thread it left called start later: refused, and said
        late = f"a thread it started called DataStreamWriter.{refused[0]}() after it returned (refused)"
        answer["code"] = {"outcome": CODE_STARTED, "type": None, "message": late}
    foreign = [q for q in seen if q not in ours]
    if foreign and answer.get("code", {}).get("outcome") != CODE_STARTED:  # the graver of the two
        started = f"a query was started past PySpark's writer (id {foreign[0]})"
        if raised := answer.get("code"):
            started += f"; then it raised {raised['type']}: {raised['message'][:200]}"
        answer["code"] = {"outcome": CODE_STARTED, "type": None, "message": started}
    return answer


def _rehearse(spark, job: dict[str, Any], ours: list[str]) -> dict[str, Any]:
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    deadline = time.monotonic() + float(job["timeout"])
    query = load_query(job["query"])
    answer: dict[str, Any] = {"spark_version": spark.version, "error": None, "stores": [], "committed": False}
    # Spark skips a file its source log names and no longer finds (a missing root path of its
    # listing is no error): the replay would read nothing, and look like a change of the code.
    answer["input_gone"] = _gone(spark, job["inputs"])
    if answer["input_gone"]:
        return answer
    with scoped_confs(spark, job["conf"]):
        before = {q.id for q in spark.streams.active}
        writer = _call_the_query(query, spark, deadline, answer)
        if _stopped(spark):
            stopped_it = "it stopped the Spark session the rehearsal runs in"
            answer.setdefault("code", {"outcome": CODE_RAISED, "type": None, "message": stopped_it})
            return answer
        stopped = _stop_queries_since(spark, before)
        if stopped:
            answer["stopped_queries"] = stopped
            running = f"a query was running after it returned: {stopped[0]}"
            answer.setdefault("code", {"outcome": CODE_STARTED, "type": None, "message": running})
        if "code" in answer or "timed_out" in answer:
            return answer
        if not hasattr(writer, "trigger") or not hasattr(writer, "start"):
            raise RehearsalRefused(f"--query {job['query']} returned {type(writer).__name__}, not a "
                                   "DataStreamWriter (df.writeStream...)")  # fmt: skip
        # Read after the function ran: it may set confs on the session as the deployment does.
        answer["session_conf"] = {k: _session_value(spark, k) for k in job["pinned"]}
        # `noop` replaces any sink, foreachBatch and foreach included: no sink code runs. Once: the
        # planned batch, replayed from its recorded offsets, and nothing after it. The location and
        # the trigger the function set are replaced too: the scratch's, and one batch.
        writer = writer.format("noop").trigger(once=True).option("checkpointLocation", job["scratch"])
        # Spark logs a failed query's stack at ERROR: the refusal is the answer, reported in words.
        level = _log_level(spark)
        spark.sparkContext.setLogLevel("OFF")
        try:
            started = _our_start(writer)
            ours.append(str(started.id))
            try:
                if not started.awaitTermination(max(deadline - time.monotonic(), 0.001)):
                    answer["timed_out"] = "the batch"
            finally:  # a deadline passed, or a signal: the scratch is about to be removed under it
                _stop(started)
        except (PySparkException, Py4JJavaError) as exc:  # what Spark raised: the answer
            answer["error"] = _named(exc)
        finally:
            spark.sparkContext.setLogLevel(level)
    if "timed_out" in answer:
        return answer
    scratch = Storage(job["scratch"].removeprefix("file:"))  # local: the flow makes it so
    answer["committed"] = answer["error"] is None and scratch.stat(f"commits/{job['batch']}") is not None
    if answer["committed"]:
        timer = threading.Timer(max(deadline - time.monotonic(), 0.0), spark.sparkContext.cancelAllJobs)
        timer.start()
        try:
            with scoped_confs(spark, job["read_conf"]):
                answer["stores"] = [_compare(spark, job, op, store) for op, store in job["stores"]]
        except (PySparkException, Py4JJavaError) as exc:  # this Spark's reader cannot read the state
            if time.monotonic() >= deadline:
                answer["timed_out"] = "the state's comparison"
            else:
                answer["compare_error"] = _named(exc)
        finally:
            timer.cancel()
    return answer


def _stopped(spark) -> bool:
    """Whether the session's context was stopped (by the user's function): a stopped SparkContext
    lets go of its JVM context. A Spark Connect session has none on this side."""
    context = getattr(spark, "_sc", None)
    return context is not None and getattr(context, "_jsc", None) is None


def _starts_seen(spark, seen: list[str]) -> Any:
    """A listener that records the id of every query this session starts, however it is started;
    None where the session takes none (then `start` and `toTable` are still refused)."""
    try:
        from pyspark.sql.streaming import StreamingQueryListener

        class Seen(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:
                seen.append(str(event.id))

            def onQueryProgress(self, event) -> None:
                pass

            def onQueryIdle(self, event) -> None:
                pass

            def onQueryTerminated(self, event) -> None:
                pass

        listener = Seen()
        spark.streams.addListener(listener)
        return listener
    except Exception:  # noqa: BLE001 - a PySpark that takes no Python listener: the writer's guard alone
        log.warning("no listener of query starts on this session: starts past PySpark's writer go unseen")
        return None


def _forget(spark, listener: Any) -> None:
    if listener is not None and not _stopped(spark):
        try:
            spark.streams.removeListener(listener)
        except Exception:  # noqa: BLE001 - a session going away: its listeners go with it
            pass


# What a query function did, as `answer["code"]["outcome"]` says it (`checkpoint.rehearsal.verdict`).
CODE_RAISED, CODE_EXITED, CODE_STARTED = "raised", "exited", "started a query"
_MESSAGE_SHOWN = 500


class _StartRefused(BaseException):
    """Raised where the user's function starts a query. A BaseException, so that an `except
    Exception` around `.start()` in the user's code does not swallow it and go on."""


class _Guard:
    """Who may start a query in this process while a rehearsal runs the user's function: nobody
    (`armed`), and never the thread of a function that outlived its deadline (`hung`: it cannot
    be killed, and is left running). Our own start comes after the function returned."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.armed = 0
        self.hung: set[int] = set()
        self.starts: list[str] = []
        self.local = threading.local()  # `ours`: this thread makes the rehearsal's own start

    def refuses(self, name: str) -> bool:
        if getattr(self.local, "ours", False):
            return False
        with self.lock:
            refused = self.armed > 0 or threading.get_ident() in self.hung
            if refused:
                self.starts.append(name)
            return refused


def _our_start(writer) -> Any:
    """The rehearsal's own start of the replay, the one start the guard lets through."""
    _guard_writers()
    _GUARD.local.ours = True
    try:
        return writer.start()
    finally:
        _GUARD.local.ours = False


_GUARD = _Guard()


def _call_the_query(query: Callable, spark, deadline: float, answer: dict[str, Any]) -> Any:
    """The user's function called on a thread of its own, no query start allowed, until the
    deadline; its writer, or None with `answer["code"]` or `answer["timed_out"]` set."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["writer"] = query(spark)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and all: an answer, not our exit
            box["raised"] = exc
        finally:  # a function that outlived its deadline and ends at last frees its thread's id
            with _GUARD.lock:
                _GUARD.hung.discard(threading.get_ident())

    _guard_writers()
    thread = threading.Thread(target=call, name="ckpt-rehearsal-query", daemon=True)
    before = set(threading.enumerate())
    try:
        thread.start()
        thread.join(max(deadline - time.monotonic(), 0.001))
    finally:
        # Its thread if it outlived the deadline, and every thread it started that still runs, may
        # never start a query: not during the rehearsal, nor after it (a non-daemon thread keeps the
        # process up to do just that).
        left = [t for t in threading.enumerate() if t not in before and (t is not thread or t.is_alive())]
        with _GUARD.lock:
            _GUARD.hung.update(t.ident for t in left if t.ident is not None)
            starts = list(_GUARD.starts)
    if thread.is_alive():  # it cannot be killed: it is left, a daemon, and may start nothing
        answer["timed_out"] = "the query's function"
        return None
    raised = box.get("raised")
    if starts:
        answer["code"] = {"outcome": CODE_STARTED, "type": None, "message": f"it called DataStreamWriter."
                          f"{starts[0]}(): a query function returns the writer (df.writeStream...), and the "
                          "rehearsal starts it on the scratch"}  # fmt: skip
    elif isinstance(raised, SystemExit):
        answer["code"] = {"outcome": CODE_EXITED, "type": "SystemExit", "message": f"exit code {raised.code}"}
    elif raised is not None:
        answer["code"] = {"outcome": CODE_RAISED, "type": type(raised).__name__,
                          "message": str(raised)[:_MESSAGE_SHOWN]}  # fmt: skip
    return box.get("writer")


def _guard_writers() -> None:
    """`DataStreamWriter.start` and `toTable` wrapped, once per process, to ask `_GUARD` first: the
    Python writer's, and the JVM's as py4j calls it (`df.writeStream._jwrite.start()` goes past
    the Python one)."""
    for cls in _writer_classes():
        for name in ("start", "toTable"):
            original = cls.__dict__[name]
            if not getattr(original, "_ckpt_guarded", False):
                setattr(cls, name, _guarded(name, original))
    try:
        from py4j.java_gateway import JavaMember  # type: ignore[import-untyped]
    except ImportError:  # no py4j (Spark Connect alone): no JVM writer on this side
        return
    call = JavaMember.__call__
    if not getattr(call, "_ckpt_guarded", False):
        JavaMember.__call__ = _guarded_jvm(call)


def _guarded_jvm(original: Callable) -> Callable:
    def call(self, *args: Any) -> Any:
        if self.name in ("start", "toTable") and _is_stream_writer(self.container):
            if _GUARD.refuses(self.name):
                raise _StartRefused(f"DataStreamWriter.{self.name}() is refused while a rehearsal runs")
        return original(self, *args)

    call._ckpt_guarded = True  # type: ignore[attr-defined]
    return call


def _is_stream_writer(java_object: Any) -> bool:
    try:
        return str(java_object.getClass().getName()).endswith("DataStreamWriter")
    except Exception:  # noqa: BLE001 - not an object whose class py4j can tell: not a writer we know
        return False


def _guarded(name: str, original: Callable) -> Callable:
    @functools.wraps(original)
    def method(self, *args: Any, **kwargs: Any) -> Any:
        if _GUARD.refuses(name):
            raise _StartRefused(f"DataStreamWriter.{name}() is refused while a rehearsal builds the query")
        return original(self, *args, **kwargs)

    method._ckpt_guarded = True  # type: ignore[attr-defined]
    return method


def _writer_classes() -> list[type]:
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    # Spark Connect's own writer, only where something imported it already: the function is handed
    # a classic session, and importing Connect without its client calls sys.exit(0) in some mains.
    connect = sys.modules.get("pyspark.sql.connect.streaming.readwriter")
    return [DataStreamWriter, *([connect.DataStreamWriter] if connect is not None else [])]


def _stop_queries_since(spark, before: set[str]) -> list[str]:
    """Every query running now that was not before the function ran, stopped: named by id and name."""
    stopped = []
    for q in spark.streams.active:
        if q.id not in before:
            _stop(q)
            stopped.append(f"{q.name or 'unnamed'} ({q.id})")
    return stopped


def _stop(query) -> None:
    try:
        query.stop()
    except Exception:  # noqa: BLE001 - stopped already, or its session is going: nothing more to stop
        log.warning("a query could not be stopped: %s", query)


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
        with _signals_held():
            spark = session()
        if original is not None:
            reach(spark, original)
        return rehearse_on(spark, job)

    return run


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT held while a JVM starts: one that lands while PySpark waits for its gateway
    leaves the JVM running with no Python to end it (and holding the caller's pipes). Delivered once
    the JVM is up, they end both, as at any other time."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGTERM, signal.SIGINT}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def in_python(python: str, master: str) -> SparkRun:
    """The port on another interpreter (another PySpark: an upgrade or a rollback). It imports this
    project from the source tree it runs from, and needs the project's dependencies installed."""

    def run(job: dict[str, Any]) -> dict[str, Any]:
        env = another_python_env()  # the user's own PYTHONPATH kept: their query's modules
        with tempfile.TemporaryDirectory(prefix="ckpt-rehearsal-job-") as folder:
            asked, answered = Path(folder) / "job.json", Path(folder) / "answer.json"
            asked.write_text(json.dumps({**job, "master": master}))
            command = [python, "-m", "jobs.rehearse", str(asked), str(answered)]
            # The child keeps its own deadline; this one is for a child that cannot (its JVM hung):
            # killed with its JVM, and a signal to this process ends the child too.
            with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True) as child:  # fmt: skip
                try:
                    out, err = child.communicate(timeout=float(job["timeout"]) + _CHILD_START_SECONDS)
                except subprocess.TimeoutExpired:
                    _kill_group(child)
                    return {"spark_version": None, "error": None, "stores": [], "committed": False,
                            "input_gone": [], "timed_out": f"the rehearsal under {python}"}  # fmt: skip
                except BaseException:
                    _kill_group(child)
                    raise
            if child.returncode != 0 or not answered.exists():
                lines = (err or out).strip().splitlines()
                # The exception's own line, not the last frame of a Java stack under it
                raised = [line for line in lines if _RAISED.match(line)]
                tail = (raised or lines)[-1:] or ["no output"]
                raise RehearsalRefused(f"the rehearsal under {python} failed (exit {child.returncode}): "
                                       f"{tail[0]}")  # fmt: skip
            return json.loads(answered.read_text())

    return run


# What another interpreter takes to start Python and a JVM, on top of the job's own deadline.
_CHILD_START_SECONDS = 120.0


def _kill_group(child: subprocess.Popen) -> None:
    """The child and what it started (its JVM, its Python workers), its session being theirs."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:  # gone already
        pass
    child.wait()


def main(argv: list[str] | None = None) -> None:
    from .spark_session import session_for

    asked, answered = argv if argv is not None else sys.argv[1:]
    job = json.loads(Path(asked).read_text())
    answer = rehearse_on(session_for(job.pop("master")), job)
    Path(answered).write_text(json.dumps(answer))


if __name__ == "__main__":
    main()
