"""Local SparkSessions configured the way the product's users run stateful queries, and what our
jobs' Spark tasks share: the crash spec handed on to them, a failed job said in one line.

Only confs common to Spark 4.1-4.3 are set here; anything a scenario varies (snapshot cadence,
retention, join state format) is set on the session right before that query starts, because
Spark records the SQL confs of a query in its first offset file and keeps them across restarts.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from checkpoint import crash
from checkpoint.errors import CheckpointError, SparkCannotReach, SparkUnavailable
from checkpoint.format import (
    CHANGELOG_CONF,
    FORMAT_VERSION_CONF,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
    SHUFFLE_PARTITIONS,
)
from checkpoint.policy import POLICY
from checkpoint.storage import Storage, scheme_of

if TYPE_CHECKING:
    from checkpoint.model import StoreId

log = logging.getLogger(__name__)

# The source tree this module runs from, which a child in another interpreter imports.
_PROJECT = Path(__file__).resolve().parent.parent


# The defaults of the state store as the product's users run it: RocksDB, changelog checkpointing,
# checkpoint format V2. Scenarios override single keys with `spark.conf.set`.
STATEFUL_DEFAULTS: dict[str, str] = {
    PROVIDER_CONF: ROCKSDB_PROVIDER,
    CHANGELOG_CONF: "true",
    FORMAT_VERSION_CONF: "2",
    SHUFFLE_PARTITIONS: "4",
}


@contextmanager
def scoped_confs(spark, confs: dict[str, str]) -> Iterator[None]:
    """SQL confs set for what runs inside (a query, one job's reads) and restored after, so that
    neither a scenario nor one of our reads leaks into what the session runs next."""
    saved = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def another_python_env(keep_pythonpath: bool = True) -> dict[str, str]:
    """The environment of a child run by another interpreter (another PySpark): this project
    importable from its source tree, first on the path (after it, the caller's own path when
    `keep_pythonpath`), and nothing that points Spark at this interpreter or installation."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "PYTHONPATH")}  # fmt: skip
    kept = os.environ.get("PYTHONPATH") if keep_pythonpath else None
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PROJECT), kept) if p)
    return env


def local_session(
    master: str = "local[2]",
    app_name: str = "ckpt-maint",
    extra_conf: dict[str, str] | None = None,
):
    """A SparkSession in local mode with the RocksDB V2 defaults.

    The maintenance interval is fixed for the lifetime of a SparkContext (the maintenance thread reads
    it once when it starts), so it is a builder setting rather than a per-query one.
    """
    from pyspark.sql import SparkSession

    # Python workers must be the interpreter that has this project installed (TWS processors and
    # foreachPartition functions are pickled by reference to their module).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local mode talks to itself only: keep the driver on loopback, not on whatever the hostname resolves to.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.maintenanceInterval": "200ms",
        "spark.driver.memory": "2g",
        "spark.sql.adaptive.enabled": "false",
        **STATEFUL_DEFAULTS,
        **(extra_conf or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def reach(spark, storage: Storage) -> None:
    """Lets the session reach a root, or refuses (`SparkCannotReach`) when its Hadoop has no file
    system for the root's scheme (`abfss://` without hadoop-azure, `gs://` without the GCS
    connector): an action asks this before it writes, not when Spark first reads.

    An S3 root's s3a is set as this project's own client reaches it: the endpoint, region and any
    credentials given as options, for that bucket only (Hadoop's per-bucket `fs.s3a.bucket.<name>.*`),
    so one session serves buckets of several stores. Spark still needs the hadoop-aws connector on
    its classpath (`spark.jars`)."""
    try:
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    except Exception:  # a Spark Connect session has no driver JVM on this side to ask or configure
        log.warning("%s: cannot ask a remote session for its file systems or set its options; the cluster "
                    "must reach the root itself", storage.url)  # fmt: skip
        return
    scheme = scheme_of(storage.spark_url)  # Hadoop's: s3a, abfss, file
    try:
        spark.sparkContext._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, hadoop)
    except Exception as exc:  # Py4J's error around Hadoop's: no such scheme, or its class not found
        lines = str(exc).splitlines()
        # Py4J's first line names its call; Hadoop's own follows, after ": "
        cause = next((ln[2:] for ln in lines if ln.startswith(": ")), lines[0] if lines else "")[:300]
        raise SparkCannotReach(
            f"this Spark has no Hadoop file system for {scheme}:// ({cause}): put the store's connector "
            "on its classpath, or fork the checkpoint to local disk and act there; nothing was written",
            storage.url,
        ) from exc
    if storage.protocol != "s3":
        return
    c = storage.s3_connection()
    prefix = f"fs.s3a.bucket.{c['bucket']}."
    endpoint = c["endpoint"]
    if endpoint:
        hadoop.set(prefix + "endpoint", endpoint)
        hadoop.set(prefix + "connection.ssl.enabled", str(endpoint.startswith("https:")).lower())
        # Stores other than AWS (MinIO, SeaweedFS, Ceph) serve buckets as paths, not host names.
        hadoop.set(prefix + "path.style.access", str("amazonaws.com" not in endpoint).lower())
    if c["region"]:
        hadoop.set(prefix + "endpoint.region", c["region"])
    if c["key"] and c["secret"]:
        hadoop.set(prefix + "access.key", c["key"])
        hadoop.set(prefix + "secret.key", c["secret"])
        provider = "SimpleAWSCredentialsProvider"
        if c["token"]:
            hadoop.set(prefix + "session.token", c["token"])
            provider = "TemporaryAWSCredentialsProvider"
        hadoop.set(prefix + "aws.credentials.provider", f"org.apache.hadoop.fs.s3a.{provider}")


def session_for(
    master: str = POLICY.spark_master, remote: str | None = None, conf: dict[str, str] | None = None
):
    """The session a rebuild job runs in: local mode, a cluster master, or a Spark Connect remote.

    Only local mode is pinned to loopback; on a cluster the executors must reach the driver, whose
    address Spark takes from SPARK_LOCAL_IP or the host name as usual.
    """
    from pyspark.sql import SparkSession

    try:
        if master.startswith("local") and not remote:
            return local_session(master=master, extra_conf=conf)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = SparkSession.builder.remote(remote) if remote else SparkSession.builder.master(master)
        builder = builder.appName("ckpt-maint")
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    except Exception as exc:  # py4j's, PySpark's and the JVM's own: the first line says which
        where = f"remote {remote!r}" if remote else f"master {master!r}"
        raise SparkUnavailable(f"the Spark session could not start on {where}: {type(exc).__name__}: "
                               f"{first_line(exc)}; "
                               "nothing was written") from exc  # fmt: skip


def task_context(spark, instead: str):
    """The session's SparkContext, which our Python tasks are started with; None under Spark
    Connect, which has none on this side, and `instead` (what is done then) is logged."""
    sc = getattr(spark, "sparkContext", None)  # a remote session raises AttributeError
    if sc is None:
        log.warning("a Spark Connect session runs no Python task of ours: %s", instead)
    return sc


# The crash tests' spec (checkpoint.crash), read on the driver and handed to each task as a Spark
# local property: a Python worker does not see the driver's environment as it is now.
_CRASH_PROPERTY = "ckpt.crash_at"


def hand_on_crash_spec(sc) -> None:
    """The driver's crash spec, for the tasks this thread starts next (`task_crash_point`)."""
    sc.setLocalProperty(_CRASH_PROPERTY, crash.spec())


def task_crash_point(point: str, store: StoreId) -> None:
    """In a Spark task: `crash_point(point, <the store's label>)` under the spec its driver handed on."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None:
        crash.crash_point(point, store.label, context.getLocalProperty(_CRASH_PROPERTY) or "")


def failure_line(exc: Exception) -> str:
    """A store's failure in one line: ours as we worded it; anything else (RocksDB, the JVM, I/O)
    by its type, its first line and where it was raised."""
    if isinstance(exc, CheckpointError):
        return str(exc)
    tb = traceback.extract_tb(exc.__traceback__)
    at = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {first_line(exc)}{at}"


def first_line(exc: Exception) -> str:
    """What a failed Spark job says, without the JVM's stack trace."""
    text = str(exc)
    for line in text.splitlines():
        if "Exception" in line or "Error" in line or "exited" in line.lower():
            return line.strip()[:300]
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
