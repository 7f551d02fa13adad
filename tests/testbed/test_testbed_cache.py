"""The suite's own machinery: the test corpora's cache under concurrent test workers (pytest-xdist: one
generates, the rest wait; the largest started in the background on a cold cache), and the options its
JVMs run with."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

from testbed import jvm
from testbed.cache import MANIFEST, cache_home, ensure_generated

# A generator that takes its time, counts its runs and writes the manifest last, as the real ones do.
_GENERATOR = f"""
import pathlib, sys, time
out = pathlib.Path(sys.argv[1])
out.mkdir()
with open(out.parent / "runs", "a") as runs:
    runs.write("x")
time.sleep(0.5)
(out / "{MANIFEST}").write_text("{{}}")
"""


def _ensure(cache: str) -> str:
    return str(ensure_generated(Path(cache), ["-c", _GENERATOR], "a test corpus", log=lambda _: None))


def test_workers_asking_at_once_generate_a_corpus_once(tmp_path: Path) -> None:
    cache = tmp_path / "corpus"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        got = pool.map(_ensure, [str(cache)] * 4)
    assert got == [str(cache)] * 4
    assert (tmp_path / "runs").read_text() == "x"
    assert (cache / MANIFEST).exists()


def test_an_incomplete_corpus_is_generated_again(tmp_path: Path) -> None:
    cache = tmp_path / "corpus"
    cache.mkdir()
    (cache / "left-by-a-killed-run").write_text("")
    assert _ensure(str(cache)) == str(cache)
    assert (tmp_path / "runs").read_text() == "x"
    assert not (cache / "left-by-a-killed-run").exists()


def test_the_suites_jvms_run_with_the_suites_options(spark) -> None:
    """The session's JVM got them (from the environment conftest sets, which every child inherits),
    and its Spark took the checkpoint manager they name."""
    from tests.conftest import JVM_OPTIONS

    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert set(JVM_OPTIONS.split()) <= set(runtime.getInputArguments())
    assert spark.conf.get(jvm.CHECKPOINT_MANAGER) == jvm.checkpoint_manager(spark.version)


def test_the_python_workers_import_pyspark_from_site_packages_with_every_other_path_kept(spark) -> None:
    """`testbed.python_workers`: a worker of the session's Spark finds Spark's zips dropped from its
    path, the rest of what Spark gave it kept (its own jar), and PySpark imported from the
    installation that the zips came from."""
    import pyspark

    def where(_):
        import os as os_
        import sys as sys_

        import pyspark as worker_pyspark

        return worker_pyspark.__file__, os_.environ.get("PYTHONPATH", ""), sys_.executable

    imported, path, executable = spark.sparkContext.parallelize([0], 1).map(where).collect()[0]
    assert imported == pyspark.__file__
    assert ".zip" not in path and "spark-core" in path
    assert Path(executable).parent == Path(sys.executable).parent


def test_the_python_workers_script_drops_only_its_pysparks_zips(tmp_path: Path) -> None:
    from testbed.python_workers import worker_python

    def venv(where: Path) -> tuple[Path, Path]:
        lib = where / "lib" / "python3.11" / "site-packages" / "pyspark" / "python" / "lib"
        lib.mkdir(parents=True)
        (lib / "pyspark.zip").write_bytes(b"")
        (where / "bin").mkdir()
        (where / "bin" / "python").symlink_to(sys.executable)
        return where / "bin" / "python", lib

    python, lib = venv(tmp_path / "a venv")
    other_lib = venv(tmp_path / "other")[1]
    script = worker_python(python, tmp_path / "scripts")
    assert script is not None and worker_python(python, tmp_path / "scripts") == script
    kept = [str(other_lib / "pyspark.zip"), "/with space/x.jar", "/a/*", str(lib / "elsewhere.jar")]
    given = [str(lib / "pyspark.zip"), kept[0], str(lib / "py4j-0.10.9.9-src.zip"), *kept[1:]]
    show = "import os, sys; print(os.environ['PYTHONPATH']); print(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(given)}
    printed = subprocess.run([script, "-c", show, "x y"], env=env, capture_output=True, text=True, check=True)
    assert printed.stdout.splitlines() == [os.pathsep.join(kept), "['x y']"]
    # No zip to drop, or a path a script cannot hold as it is: Spark's own way.
    (lib / "pyspark.zip").unlink()
    assert worker_python(python, tmp_path / "scripts") is None
    quoted = venv(tmp_path / "it's")[0]
    assert worker_python(quoted, tmp_path / "scripts") is None


# A child that starts this Python's Spark as the suite's JVMs start, and says whether its JVM mapped
# the class archive and what it printed.
_MAPS = """
import sys
from jobs.spark_session import local_session
spark = local_session(app_name="maps")
pid = spark._jvm.java.lang.ProcessHandle.current().pid()
print("MAPPED" if sys.argv[1] in open(f"/proc/{pid}/maps").read() else "NOT MAPPED")
spark.stop()
"""


def test_a_jvm_maps_the_class_archive_and_one_it_cannot_map_changes_nothing(spark, tmp_path: Path) -> None:
    """`testbed.class_archive`: once the cache holds it, a JVM started as the suite starts them maps
    Spark's classes from it, printing nothing more. An archive a JVM cannot use (another classpath)
    is skipped without a word, and a truncated one never gets the archive's name."""
    import os
    import shutil
    import subprocess
    import sys

    import pytest

    from testbed import class_archive

    archive = class_archive.ensure(cache_home())
    assert archive is not None and archive.exists()
    env = {**os.environ, "SPARK_SUBMIT_OPTS": jvm.options(spark.version, archive)}
    started = subprocess.run([sys.executable, "-c", _MAPS, str(archive)], env=env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert started.returncode == 0 and started.stdout.splitlines() == ["MAPPED"], started.stderr[-2000:]
    assert "cds" not in started.stderr

    given = [str(class_archive.java()), *jvm.options(spark.version, archive).split()]
    elsewhere = subprocess.run([*given, "-cp", str(tmp_path), "-version"], capture_output=True, text=True,
                               timeout=60)  # fmt: skip
    assert elsewhere.returncode == 0 and "warning" not in elsewhere.stdout + elsewhere.stderr

    for name, size in (("whole", archive.stat().st_size), ("truncated", 1 << 20)):
        scratch = tmp_path / name
        scratch.mkdir()
        shutil.copyfile(archive, scratch / "classes.jsa")
        os.truncate(scratch / "classes.jsa", size)
        shutil.copyfile(class_archive.classpath_of(archive), scratch / "classpath")
        if name == "whole":
            class_archive.publish(scratch, tmp_path / f"{name}.jsa")
            continue
        with pytest.raises(RuntimeError, match="cannot be mapped"):
            class_archive.publish(scratch, tmp_path / f"{name}.jsa")
    assert (tmp_path / "whole.jsa").exists() and not (tmp_path / "truncated.jsa").exists()


def test_an_archive_whose_jars_are_gone_is_pruned_and_one_in_use_is_kept(tmp_path: Path) -> None:
    """A fresh clone's virtualenv leaves an archive of 0.2 GB that no JVM can map once the clone is
    removed: the next archive written prunes it (`testbed.class_archive.prune`). A folder named on
    the classpath that does not exist (Spark's `conf`) keeps nothing from being used."""
    from testbed import class_archive

    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / "spark-core.jar").write_bytes(b"")
    folder = tmp_path / "jvm-classes"
    folder.mkdir()
    jars = {
        "kept": tmp_path / "venv" / "spark-core.jar",
        "gone": tmp_path / "removed-clone" / "spark-core.jar",
    }
    for name, jar in jars.items():
        (folder / f"spark-{name}.classpath").write_text(
            os.pathsep.join([str(jar.parent / "conf"), str(jar), "x/*"])
        )
        (folder / f"spark-{name}.jsa").write_bytes(b"archive")
        (folder / f".spark-{name}.jsa.lock").write_bytes(b"")
    assert class_archive.prune(folder) == [folder / "spark-gone.jsa"]
    assert sorted(p.name for p in folder.iterdir()) == [
        ".spark-kept.jsa.lock",
        "spark-kept.classpath",
        "spark-kept.jsa",
    ]
    assert class_archive.prune(folder) == []


def test_a_fleet_of_an_earlier_version_is_superseded_and_nothing_else(tmp_path: Path) -> None:
    """A new fleet's version removes the earlier ones' (0.8 GiB each), not its own, a later one's
    (another clone's, newer), or anything else named alike."""
    from testbed import fleet

    names = [f"fleet-v{fleet.FLEET_VERSION - 1}", f"fleet-v{fleet.FLEET_VERSION}",
             f"fleet-v{fleet.FLEET_VERSION + 1}", "fleet-vx", "fleet-v0-notes"]  # fmt: skip
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / "fleet-v0").write_text("a file")
    assert fleet.superseded(tmp_path) == [tmp_path / names[0]]


def test_a_child_under_another_pyspark_maps_that_sparks_own_archive(spark) -> None:
    """The other PySparks' JVMs (the restarts under the Spark that wrote a checkpoint) start from
    an archive of their own Spark's classes, named by `testbed.generations.child_env`, not the
    suite's, and their Python workers are their own interpreter without its PySpark's zips."""
    from testbed import class_archive, generations

    python = generations.python_of(cache_home(), "4.2.1")
    archive = class_archive.ensure(cache_home(), python)
    assert archive is not None and archive.exists() and archive != class_archive.path_for(cache_home())
    env = generations.child_env("4.2.1", python)
    assert env["SPARK_SUBMIT_OPTS"].split().count(f"{jvm.ARCHIVE_OPTION}{archive}") == 1
    assert f"{jvm.ARCHIVE_OPTION}{class_archive.path_for(cache_home())}" not in env["SPARK_SUBMIT_OPTS"]
    assert str(python) in Path(env["PYSPARK_PYTHON"]).read_text()
    started = subprocess.run([python, "-c", _MAPS, str(archive)], env=env, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert started.returncode == 0 and started.stdout.splitlines() == ["MAPPED"], started.stderr[-2000:]


def test_a_child_gets_the_checkpoint_manager_as_its_spark_names_it() -> None:
    """Spark 4.1 moved the class; a 4.0 child given 4.1's name would fail to start a query."""

    suite = jvm.options("4.3.0")
    assert "streaming.checkpointing.FileSystemBasedCheckpointFileManager" in suite
    to_4_0 = jvm.for_version(suite, "4.0.5")
    assert f"-D{jvm.CHECKPOINT_MANAGER}={jvm.checkpoint_manager('4.0.5')}" in to_4_0.split()
    assert ".checkpointing." not in to_4_0
    assert jvm.for_version(to_4_0, "4.2.1") == suite
    # Anything else, a manager somebody chose among it, is passed on as it is.
    own = "-Xmx1g -Dspark.sql.streaming.checkpointFileManagerClass=com.example.Manager"
    assert jvm.for_version(own, "4.0.5") == own
    # The class archive holds the suite's Spark's classes: another Spark's child starts without it.
    archived = jvm.options("4.3.0", Path("/cache/jvm-classes/spark-1.jsa"))
    assert jvm.for_version(archived, "4.0.5") == to_4_0 and "jsa" in archived


def test_the_suites_checkpoint_manager_writes_what_sparks_default_writes(spark, tmp_path: Path) -> None:
    """`testbed.jvm`: the FileSystem-based manager the suite's JVMs use, against Spark's default
    (FileContext-based), on one query: the same files by name, and the same state."""
    import re

    from jobs.spark_session import scoped_confs
    from testbed.corpus import scenario_named
    from tests.support.state import latest_state

    scenario = scenario_named("long_chain")
    default = jvm.checkpoint_manager(spark.version).replace("FileSystemBased", "FileContextBased")
    written = {}
    for manager in (jvm.checkpoint_manager(spark.version), default):
        out = tmp_path / manager.rsplit(".", 1)[1]
        scenario.write_inputs(out, 4)
        with scoped_confs(spark, {jvm.CHECKPOINT_MANAGER: manager}):
            scenario.run(spark, out, out / "checkpoint")
        uuid = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
        names = sorted(uuid.sub("<id>", str(p.relative_to(out))) for p in (out / "checkpoint").rglob("*"))
        written[manager] = names, latest_state(spark, out / "checkpoint", scenario.name)
    (names, state), (default_names, default_state) = written.values()
    assert any(name.endswith(".changelog") for name in names) and state
    assert names == default_names
    assert state == default_state


def test_the_background_generation_starts_only_what_is_missing_and_ends_with_the_session(
    tmp_path: Path, monkeypatch
) -> None:
    """`testbed.prewarm`: a corpus with its manifest is not generated again, so a warm cache starts
    no process; a generation still running when the session ends is killed with its children."""
    import contextlib
    import os
    import signal
    import subprocess
    import time

    from testbed import cache, corpus, defaults, generations, generators, prewarm

    monkeypatch.setenv("CKPT_CORPUS_CACHE", str(tmp_path / "corpus"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    names = ["corpus", "defaults", "generations", "rescue"]
    assert prewarm.missing(names) == names
    for folder in (corpus.default_cache_dir(), defaults.default_cache_dir(), generators.rescue_cache_dir()):
        folder.mkdir(parents=True)
        (folder / MANIFEST).write_text("{}")
    assert prewarm.missing(names) == ["generations"]
    # Every release's virtualenv and both folders it writes; a virtualenv missing is missing work.
    home = cache.cache_home()
    for version in generations.RELEASES.values():
        for defaults_too in (False, True):
            folder = generations._written_by(home, version, defaults_too)
            folder.mkdir(parents=True)
            (folder / MANIFEST).write_text("{}")
    assert prewarm.missing(names) == ["generations"]
    for version in generations.RELEASES.values():
        generations._venv_marker(home, version).parent.mkdir(parents=True)
        generations._venv_marker(home, version).write_text(version)
    assert prewarm.missing(names) == [] and prewarm.start(names, tmp_path / "log") is None

    pids = tmp_path / "pids"
    # A leader that would end by itself in 5 s, leaving its child (a generator) running.
    group = subprocess.Popen(["sh", "-c", f"sleep 600 & echo $! > {pids}; sleep 5"], start_new_session=True)
    while not pids.exists() or not pids.read_text().strip():
        time.sleep(0.05)
    child = int(pids.read_text())
    try:
        prewarm.stop(group)
        time.sleep(0.2)
        stat = Path(f"/proc/{child}/stat")  # killed, and a zombie until whatever adopted it reaps it
        assert group.returncode is not None
        assert not stat.exists() or stat.read_text().split(") ")[1][0] == "Z"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_a_disk_too_small_for_the_suite_is_said_before_any_test(tmp_path: Path) -> None:
    """Places on one disk add up; each disk short of room is one line naming what needs it."""
    from tests.support.disk import GIB, shortfall

    needs = [("temporary files", tmp_path / "not-yet" / "made", 2 * GIB), ("the cache", tmp_path, 5 * GIB)]
    assert shortfall(needs, free=lambda _: 7 * GIB) == []
    (line,) = shortfall(needs, free=lambda _: 6 * GIB)
    assert line.startswith("6.0 GiB free where the suite needs 7.0 GiB: temporary files in ")
    assert "the cache in" in line
    assert shortfall([("temporary files", tmp_path, 0)], free=lambda _: 0) == []


def test_the_temporary_files_go_to_memory_only_where_that_is_safe(tmp_path: Path) -> None:
    """A tmpfs with room, exec allowed, and a folder this user alone owns; a `TMPDIR` already set,
    another file system, `noexec`, too little room or memory, or a planted link or open folder
    keep the temporary files where they were."""
    import os

    from tests.support.disk import GIB, ram_temp

    ram = tmp_path / "shm"
    ram.mkdir()

    def place(mounts: str, free: int = 8 * GIB, available: int = 8 * GIB, **environ: str) -> Path | None:
        return ram_temp(4 * GIB, environ, ram, lambda: mounts, lambda _: free, lambda: available)

    tmpfs = f"/dev/vda / ext4 rw 0 0\ntmpfs {ram} tmpfs rw,nosuid,nodev 0 0\n"
    folder = place(tmpfs)
    assert folder == ram / f"ckpt-tests-{os.getuid()}" and folder.stat().st_mode & 0o777 == 0o700
    assert place(tmpfs) == folder  # a later session's
    assert place(tmpfs, TMPDIR="/elsewhere") is None
    assert place(f"/dev/vda / ext4 rw 0 0\ntmpfs {ram}ish tmpfs rw 0 0\n") is None  # the disk holds it
    assert place(tmpfs.replace("nodev", "noexec")) is None
    assert place(tmpfs, free=3 * GIB) is None and place(tmpfs, available=3 * GIB) is None
    folder.chmod(0o777)
    assert place(tmpfs) is None
    folder.rmdir()
    folder.symlink_to(tmp_path)
    assert place(tmpfs) is None


def test_an_untouched_restart_is_run_once_for_what_it_read(spark, tmp_path, monkeypatch) -> None:
    """Cached under a digest of what the restart read: the same bytes elsewhere hit it; a byte of the
    copy, an input or a SQL conf changed misses it; a restart that raises caches nothing; a
    transformWithState query (processing-time TTLs and timers) is never cached."""
    import shutil

    import pytest

    from jobs.spark_session import scoped_confs
    from testbed.restart import untouched

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    scenario = tmp_path / "scenario"
    (scenario / "input").mkdir(parents=True)
    (scenario / "input" / "0.json").write_text('{"k": 1}\n')
    (scenario / "checkpoint" / "commits").mkdir(parents=True)
    (scenario / "checkpoint" / "commits" / "0").write_text("v1\n{}")
    copy = Path(shutil.copytree(scenario / "checkpoint", tmp_path / "copy"))
    runs: list[Path] = []

    def restarted(where: Path, name: str = "long_chain", shape: str = "state") -> dict:
        def restart_it() -> dict:
            runs.append(where)
            return {"state": [f"run {len(runs)}"]}

        return untouched(spark, shape, name, scenario, where, {"max_files": 1}, restart_it)

    assert restarted(scenario / "checkpoint") == restarted(copy) == {"state": ["run 1"]}
    assert restarted(copy, shape="other") == {"state": ["run 2"]}
    (copy / "commits" / "0").write_text("v1\n{} ")
    assert restarted(copy) == {"state": ["run 3"]}
    (scenario / "input" / "0.json").write_text('{"k": 2}\n')
    assert restarted(copy) == {"state": ["run 4"]}
    with scoped_confs(spark, {"spark.sql.shuffle.partitions": "7"}):
        assert restarted(copy) == {"state": ["run 5"]}
    assert restarted(copy, name="every_state") == {"state": ["run 6"]}
    assert restarted(copy, name="every_state") == {"state": ["run 7"]}

    def raising() -> dict:
        raise RuntimeError("the restart failed")

    how = {"max_files": 2}
    with pytest.raises(RuntimeError):
        untouched(spark, "state", "long_chain", scenario, copy, how, raising)
    assert untouched(spark, "state", "long_chain", scenario, copy, how, lambda: {"s": 1}) == {"s": 1}
