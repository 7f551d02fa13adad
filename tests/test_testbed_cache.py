"""The suite's own machinery: the test corpora's cache under concurrent test workers (pytest-xdist: one
generates, the rest wait; the largest started in the background on a cold cache), and the options its
JVMs run with."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from testbed.corpus import MANIFEST, ensure_generated

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
    """The session's JVM got them (from the environment conftest sets, which every child inherits)."""
    from tests.conftest import JVM_OPTIONS

    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert set(JVM_OPTIONS.split()) <= set(runtime.getInputArguments())


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

    from testbed import corpus, defaults, prewarm

    monkeypatch.setenv("CKPT_CORPUS_CACHE", str(tmp_path / "corpus"))
    names = ["corpus", "defaults", "rescue"]
    assert prewarm.missing(names) == names
    for folder in (corpus.default_cache_dir(), defaults.default_cache_dir(), corpus.rescue_cache_dir()):
        folder.mkdir(parents=True)
        (folder / MANIFEST).write_text("{}")
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
