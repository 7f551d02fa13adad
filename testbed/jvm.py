"""The options of the test suite's JVMs: its own session's and every child's (the corpus generators,
the other PySparks' restarts, the CLI, `dagster dev` and its runs), which inherit them through
`SPARK_SUBMIT_OPTS` (`tests/conftest.py` sets it). Deployments and benches keep the JVM's defaults.

They live minutes, see little data and write many small files on a local disk, so most of their CPU
went to work that is not the test's (docs/testing.md gives the figures):
- C2's compilations and G1's threads: C1 alone and the serial collector instead;
- a process for every file Spark writes. Without Hadoop's native library, which PySpark does not
  ship, Hadoop's local filesystem runs `readlink` for every link status FileContext asks while it
  renames, and `chmod` for every file it creates. Spark's FileSystem-based checkpoint manager writes
  the same files (`tests/testbed/test_testbed_cache.py` compares them) without the FileContext, so without
  the `readlink`s; and the JVM starts the `chmod`s that remain by vfork, not through jspawnhelper.
  It reads at least as strictly: a restart through it refused a stale Hadoop `.crc` of Spark's own
  sidecar that a restart through the FileContext-based one read past
  (`tests/checkpoint/compaction/test_compaction.py`).
"""

from __future__ import annotations

import re
from pathlib import Path

# C1 alone, the serial collector, children started by vfork.
JAVA = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djdk.lang.Process.launchMechanism=VFORK"
# The class archive (`testbed.class_archive`), and its warnings off: a JVM that cannot map one
# starts without it, and its warning would land on stdout, in `ckpt --json`'s output.
ARCHIVE_OPTION = "-XX:SharedArchiveFile="
ARCHIVE_SILENT = "-Xlog:cds=off,cds+dynamic=off"
_ARCHIVE = re.compile(rf" ?(?:{re.escape(ARCHIVE_OPTION)}\S+|{re.escape(ARCHIVE_SILENT)})(?!\S)")
# Spark reads `spark.*` system properties as its conf; 4.1 moved the class into a package of its own.
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
_SUITES_MANAGER = re.compile(
    rf"-D{re.escape(CHECKPOINT_MANAGER)}=org\.apache\.spark\.sql\.execution\.streaming"
    r"(\.checkpointing)?\.FileSystemBasedCheckpointFileManager(?!\S)"
)


def checkpoint_manager(spark_version: str) -> str:
    """Spark's FileSystem-based checkpoint manager, by its name in `spark_version`."""
    major, minor = (int(part) for part in spark_version.split(".")[:2])
    package = "org.apache.spark.sql.execution.streaming"
    if (major, minor) >= (4, 1):
        package += ".checkpointing"
    return f"{package}.FileSystemBasedCheckpointFileManager"


def _manager_option(spark_version: str) -> str:
    return f"-D{CHECKPOINT_MANAGER}={checkpoint_manager(spark_version)}"


def options(spark_version: str, archive: Path | None = None, temp: str | None = None) -> str:
    """The suite's JVM options for a Spark of `spark_version`, with the class archive of that
    Spark's classes if there is one (`testbed.class_archive`), and `temp` as the JVM's temporary
    folder if given (Java takes /tmp whatever `TMPDIR` says; Spark's shuffle files and RocksDB's
    working copies go there)."""
    named = f" {archive_options(archive)}" if archive is not None else ""
    at = f" -Djava.io.tmpdir={temp}" if temp else ""
    return f"{JAVA} {_manager_option(spark_version)}{at}{named}"


def archive_options(archive: Path) -> str:
    """The options that map a class archive, silently skipped where the JVM cannot use it."""
    return f"{ARCHIVE_OPTION}{archive} {ARCHIVE_SILENT}"


def for_version(submit_opts: str, spark_version: str) -> str:
    """`submit_opts` (a parent's `SPARK_SUBMIT_OPTS`) for a child running `spark_version`: the
    suite's checkpoint manager, if named there, named as that Spark names it; the suite's class
    archive dropped (it holds another Spark's classes: the child's own is named by its caller,
    `testbed.generations.child_env`); the rest as it is."""
    return _ARCHIVE.sub("", _SUITES_MANAGER.sub(_manager_option(spark_version), submit_opts))
