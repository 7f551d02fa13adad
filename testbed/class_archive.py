"""A class-data archive of the suite's Spark (the JDK's AppCDS), which its JVMs map instead of
loading, verifying and linking Spark's classes again, each time one starts.

The suite starts many JVMs: a session per worker, and the CLI's, Dagster's runs' and the corpus
generators' children. Each spent most of its first 12 seconds loading classes: a session and its
first job took 12.6 s on an idle machine, 5.7 s with the archive. The archive is written once per
Spark installation and JVM build into the cache (`ensure`, in the background from the session's
start: `testbed.prewarm`), by a child that runs a stateful query with `-XX:ArchiveClassesAtExit`:

    python -m testbed.class_archive OUT

What a JVM is given never fails it, whatever the cache holds:
- no archive yet (a cold cache's first minutes): the JVM starts as it did before, silently;
- an archive of another classpath or build (the key says which, so only a hand-made one): refused
  by the JVM, silently (`testbed.jvm`: its warning would land in `ckpt --json`'s stdout);
- a truncated archive crashes the JVM, so one is only ever named by a rename, after a JVM has
  loaded it with `-Xshare:on` (which fails on any archive it cannot use).
Deployments and benches never get it (`testbed.jvm`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed import jvm
from testbed.cache import cache_lock
from testbed.python_workers import installed_pyspark, pyspark_version

# Bump when the workload changes: it keys the archives.
ARCHIVE_VERSION = 1


def java() -> Path | None:
    """The java Spark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(w) if (w := shutil.which("java")) else None)
    return found if found is not None and found.is_file() else None


def _spark_home() -> Path | None:
    spec = importlib.util.find_spec("pyspark")
    return Path(spec.origin).parent if spec and spec.origin else None


def path_for(cache: Path, python: Path | None = None) -> Path | None:
    """Where the archive of this interpreter's PySpark (or of the one installed beside `python`,
    another PySpark's) and this JVM lives, keyed by all that the JVM checks before it maps one (its
    build, each jar of the classpath by size and time, the options it was written with); None
    without Java or PySpark (the unit tier)."""
    runner = java()
    spark_home = _spark_home() if python is None else installed_pyspark(python)
    if runner is None or spark_home is None or not (spark_home / "jars").is_dir():
        return None
    if (build := _build_of(runner)) is None:
        return None
    jars = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in (spark_home / "jars").iterdir())
    key = json.dumps([ARCHIVE_VERSION, str(runner.resolve()), build, jvm.JAVA, str(spark_home), jars])
    return cache / "jvm-classes" / f"spark-{hashlib.sha256(key.encode()).hexdigest()[:20]}.jsa"


@functools.cache
def _build_of(runner: Path) -> str | None:
    """What `java -version` says of the JVM's build, asked once a process: every child under another
    PySpark (`testbed.generations.child_env`) names its archive by it."""
    try:
        build = subprocess.run([str(runner), "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return build.stderr if build.returncode == 0 else None


def ready(cache: Path, python: Path | None = None) -> bool:
    """Whether `cache` holds the archive, or there is none to make (no Java, no PySpark)."""
    archive = path_for(cache, python)
    return archive is None or archive.exists()


def ensure(cache: Path, python: Path | None = None) -> Path | None:
    """The archive (`path_for`), written first if the cache lacks it (under a lock the workers share)."""
    archive = path_for(cache, python)
    if archive is None or archive.exists():
        return archive
    with cache_lock(archive):
        if archive.exists():
            return archive
        for stale in archive.parent.glob(".writing-*"):  # a writer killed part way (the lock is ours)
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".writing-") as scratch:
            _write(Path(scratch), archive, python)
    prune(archive.parent)
    return archive


def prune(folder: Path) -> list[Path]:
    """Removes the archives no JVM can map any more, and returns them: those whose classpath names
    a jar that is gone (a fresh clone's virtualenv, removed, left 0.2 GB each in the cache)."""
    gone = []
    for classpath in sorted(folder.glob("spark-*.classpath")):
        # Only the jars: the classpath also names folders that need not exist (Spark's `conf`).
        jars = [entry for entry in classpath.read_text().split(os.pathsep) if entry.endswith(".jar")]
        if all(os.path.exists(jar) for jar in jars):
            continue
        archive = classpath.with_suffix(".jsa")
        for stale in (archive, archive.with_name(f".{archive.name}.lock"), classpath):
            stale.unlink(missing_ok=True)  # another session's prune may have been first
        gone.append(archive)
    return gone


def _write(scratch: Path, archive: Path, python: Path | None) -> None:
    from importlib.metadata import version

    from jobs.spark_session import another_python_env

    written = scratch / "classes.jsa"
    if python is None:
        python, env, release = Path(sys.executable), dict(os.environ), version("pyspark")
    else:  # another PySpark's interpreter: this project from its source tree, nothing of this venv's
        pyspark = installed_pyspark(python)
        release = pyspark_version(pyspark) if pyspark else None
        if release is None:
            raise RuntimeError(f"no PySpark release recorded beside {python}")
        env = another_python_env(keep_pythonpath=False)
    env["SPARK_SUBMIT_OPTS"] = f"{jvm.options(release)} -XX:ArchiveClassesAtExit={written}"
    subprocess.run([str(python), "-m", "testbed.class_archive", str(scratch)], env=env, check=True,
                   timeout=900, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    # The JVM ends once its Python has (its stdin closes), and writes the archive as it ends.
    pid = (scratch / "pid").read_text()
    for _ in range(1200):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"the JVM {pid} writing the class archive did not end within 120 s")
    publish(scratch, archive)


def publish(scratch: Path, archive: Path) -> None:
    """Names the archive written in `scratch` `archive`, once a JVM of the classpath it was written
    for has mapped it: -Xshare:on refuses to start otherwise (a truncated archive crashes it)."""
    written, classpath = scratch / "classes.jsa", scratch / "classpath"
    runner = java()
    assert runner is not None
    command = [str(runner), *jvm.JAVA.split(), "-Xshare:on", f"{jvm.ARCHIVE_OPTION}{written}",
               "-cp", classpath.read_text(), "-version"]  # fmt: skip
    # In the scratch folder: a JVM that crashes on the archive leaves its hs_err file there.
    check = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=scratch)
    if check.returncode != 0:
        raise RuntimeError(f"the class archive {archive.name} cannot be mapped: {check.stdout[-500:]}")
    shutil.copyfile(classpath, classpath_of(archive))
    os.replace(written, archive)


def classpath_of(archive: Path) -> Path:
    """The classpath `archive` was written for, kept beside it."""
    return archive.with_suffix(".classpath")


def main(argv: list[str] | None = None) -> None:
    """The workload whose classes the archive keeps: a session, a stateful query on RocksDB, a join,
    and Spark's state reader. Leaves the JVM's pid and classpath in the scratch folder: the JVM
    writes the archive once this process has ended."""
    from jobs.spark_session import local_session
    from testbed.corpus import scenario_named
    from testbed.restart import state_rows

    scratch = Path((argv or sys.argv[1:])[0])
    spark = local_session(app_name="ckpt-class-archive")
    (scratch / "pid").write_text(str(spark._jvm.java.lang.ProcessHandle.current().pid()))
    (scratch / "classpath").write_text(spark._jvm.java.lang.System.getProperty("java.class.path"))
    for name in ("long_chain", "join"):
        scenario, out = scenario_named(name), scratch / name
        scenario.write_inputs(out, 3)
        scenario.run(spark, out, out / "checkpoint")
        if not spark.version.startswith("4.0."):  # 4.0's state reader cannot read format V2
            state_rows(spark, out / "checkpoint", name)
    spark.stop()


if __name__ == "__main__":
    main()
