"""The suite's own machinery: the test corpora's cache under concurrent test workers (pytest-xdist: one
generates, the rest wait), and the options its JVMs run with."""

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
