"""Checkpoints written by the other release lines of PySpark with format V2, and restarts under
them: the proof that this release writes only what the checkpoint's own Spark reads (docs/safety.md).

Each release line runs in a virtualenv of its own (`python_of`: PySpark from PyPI, one ~430 MB
download, and `PACKAGES`), cached beside the corpus as the
s3a jars are. In it, this project's own corpus generator writes `SCENARIOS`, and
`python -m testbed.restart` restarts them, so the same queries run under every version.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from jobs.spark_session import another_python_env
from testbed import class_archive, jvm
from testbed.cache import MANIFEST, cache_home, cache_lock
from testbed.corpus import GENERATOR_VERSION as CORPUS_VERSION
from testbed.defaults import DEFAULTS_VERSION
from testbed.python_workers import worker_python
from testbed.restart import keep_restart, kept_restart, untouched_key

# The newest patch release of each line before the project's own (4.3, the test session's).
RELEASES = {"4.0": "4.0.5", "4.1": "4.1.4", "4.2": "4.2.1"}
# An aggregation whose chain is changelogs only (no base zip: the case that broke under 4.0), a
# join whose stores sit on Spark's own snapshots, and transformWithStateInPandas (operator metadata
# v2 naming its schema files, which a fork rewrites).
SCENARIOS = ("long_chain", "join", "list_state")
# Spark's defaults (`testbed.defaults`): the HDFS-backed store with its own snapshots, and RocksDB
# format V1 with changelogs.
DEFAULT_SCENARIOS = ("hdfs_agg", "rocksdb_v1_changelog")
# What `testbed.corpus` needs besides PySpark: the project's storage and policy modules, the
# format package's readers (its face imports them all: lz4, zstd, xxhash, crc32c), and PySpark's
# pandas API with its Spark Connect protobufs for transformWithStateInPandas.
PACKAGES = ("fsspec", "humanfriendly", "pandas", "pyarrow", "protobuf", "grpcio", "lz4", "zstandard",
            "xxhash", "crc32c")  # fmt: skip
# Bump when how the checkpoints are written changes: it keys the caches of what the venvs wrote.
GENERATOR_VERSION = 2


def child_env(spark_version: str | None = None, python: Path | None = None) -> dict[str, str]:
    """The environment of a child in another venv: this project importable from the source tree,
    nothing that points Spark at this venv's interpreter or installation, and the suite's JVM
    options (`testbed.jvm`) as the child's Spark, `spark_version`, names them, with the class
    archive of the PySpark beside its interpreter, `python` (`testbed.class_archive`); its Python
    workers that interpreter without its PySpark's zips (`testbed.python_workers`)."""
    env = another_python_env(keep_pythonpath=False)
    if spark_version and "SPARK_SUBMIT_OPTS" in env:
        env["SPARK_SUBMIT_OPTS"] = jvm.for_version(env["SPARK_SUBMIT_OPTS"], spark_version)
        if python is not None and (archive := class_archive.path_for(cache_home(), python)):
            env["SPARK_SUBMIT_OPTS"] += f" {jvm.archive_options(archive)}"
    if python is not None:
        if workers := worker_python(python, cache_home() / "python-workers"):
            env["PYSPARK_PYTHON"] = str(workers)
    return env


def _venv_marker(cache: Path, version: str) -> Path:
    # A venv is completed when PACKAGES grows; what it wrote stays valid (keyed by GENERATOR_VERSION).
    return cache / f"pyspark-{version}" / f"ok-v{GENERATOR_VERSION}-{len(PACKAGES)}"


def venv_ready(cache: Path, version: str) -> bool:
    """Whether the cached virtualenv with PySpark `version` is complete (else `python_of` makes it)."""
    return _venv_marker(cache, version).exists()


def python_of(cache: Path, version: str) -> Path:
    """The interpreter of a cached virtualenv with PySpark `version`."""
    marker = _venv_marker(cache, version)
    venv = marker.parent
    python = venv / "bin" / "python"
    if marker.exists():
        return python
    with cache_lock(venv):
        if not marker.exists():
            if not python.exists():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            packages = [f"pyspark=={version}", *PACKAGES]
            # Byte-compiling all of PySpark (a child imports a part of it) took 7.5 of the install's 18 CPU-s.
            install = [str(python), "-m", "pip", "install", "--quiet", "--no-compile", *packages]
            subprocess.run(install, check=True, timeout=1800)
            marker.write_text(version)
    return python


def ensure_written_by(cache: Path, version: str, *, defaults: bool = False) -> Path:
    """`SCENARIOS` (with `defaults`: `DEFAULT_SCENARIOS`) as PySpark `version` writes them (a
    corpus folder: `<name>/checkpoint`, the inputs beside it), generated once per generator version."""
    done = _written_by(cache, version, defaults)
    module, names = ("testbed.defaults", DEFAULT_SCENARIOS) if defaults else ("testbed.corpus", SCENARIOS)
    if (done / MANIFEST).exists():
        return done
    python = python_of(cache, version)
    with cache_lock(done):
        if (done / MANIFEST).exists():
            return done
        work = done.with_name(done.name + ".partial")
        shutil.rmtree(work, ignore_errors=True)
        command = [str(python), "-m", module, str(work), "--only", *names]
        subprocess.run(command, check=True, env=child_env(version, python), cwd=cache, timeout=1800)
        written = json.loads((work / MANIFEST).read_text())["spark_version"]
        if written != version:
            raise RuntimeError(f"{python} wrote with Spark {written}, not {version}")
        work.rename(done)
    return done


def _written_by(cache: Path, version: str, defaults: bool) -> Path:
    if defaults:
        return cache / f"written-by-{version}-defaults-v{DEFAULTS_VERSION}.{GENERATOR_VERSION}"
    return cache / f"written-by-{version}-v{CORPUS_VERSION}.{GENERATOR_VERSION}"


def ensure_every_release(cache: Path | None = None) -> None:
    """Every release line's virtualenv, what it writes (`ensure_written_by`) and its Spark's class
    archive (`testbed.class_archive`), one release after another, oldest first: the background
    generation of a cold cache (`testbed.prewarm`)."""
    cache = cache or cache_home()
    for version in RELEASES.values():
        python = python_of(cache, version)
        for defaults in (False, True):
            ensure_written_by(cache, version, defaults=defaults)
        class_archive.ensure(cache, python)


def every_release_ready(cache: Path | None = None) -> bool:
    """Whether the cache holds what `ensure_every_release` makes."""
    cache = cache or cache_home()
    versions = RELEASES.values()
    written = [_written_by(cache, version, defaults) for version in versions for defaults in (False, True)]
    ready = all(venv_ready(cache, v) for v in versions) and all((w / MANIFEST).exists() for w in written)
    return ready and all(class_archive.ready(cache, python_of(cache, v)) for v in versions)


def restart_under(cache: Path, version: str, runs: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    """Restarts under PySpark `version` (see `restart_with`), checked to be that version. A run
    whose `copy` is "untouched" is kept in the cache as the session Spark's controls are
    (`testbed.restart.untouched`), keyed by the version and the virtualenv too."""
    python = python_of(cache, version)
    how = ["under", version, _venv_marker(cache, version).name]
    keys = [untouched_key([*how, bool(run.get("read_state", True))], run["scenario"],
                          Path(run["scenario_dir"]), Path(run["checkpoint"]))
            if run.get("copy") == "untouched" else None for run in runs]  # fmt: skip
    results: list[dict[str, Any] | None] = [kept_restart(k) if k else None for k in keys]
    todo = [i for i, r in enumerate(results) if r is None]
    if todo:
        for i, result in zip(todo, restart_with(python, [runs[i] for i in todo], work, version), strict=True):
            results[i] = result
            if key := keys[i]:
                keep_restart(key, result)
    done = [r for r in results if r is not None]
    if any(r["spark_version"] != version for r in done):
        raise RuntimeError(f"restarted under {done[0]['spark_version']}, not {version}")
    return done


def restart_with(
    python: Path, runs: list[dict[str, Any]], work: Path, spark_version: str | None = None
) -> list[dict[str, Any]]:
    """Restarts in one child process of `python` (one JVM): each run names `scenario`,
    `scenario_dir`, `checkpoint`, `extra` and optionally `read_state` as `testbed.restart.restart`
    takes them. Returns what each emitted, the state it ended with and the Spark version, in order.
    `spark_version`, the child's, names the suite's JVM options as it needs them (`child_env`)."""
    work.mkdir(parents=True, exist_ok=True)
    spec, out = work / "restarts.json", work / "restarted.json"
    spec.write_text(json.dumps([{k: v if isinstance(v, bool) else str(v) for k, v in run.items()}
                                for run in runs]))  # fmt: skip
    command = [str(python), "-m", "testbed.restart", str(spec), str(out)]
    subprocess.run(command, check=True, env=child_env(spark_version, python), cwd=work, timeout=1800)
    return json.loads(out.read_text())
