"""The user's own code behind the rehearsal's boundary (docs/safety.md, "user code behind a
boundary"; `jobs.rehearse`): a query function that raises, exits, starts its query (as Spark's
examples do in `main`), or never returns, is an outcome with its own exit code, nothing runs for
real, nothing is left running, and the scratch is removed, by a signal too. The scratch folder is
checked by place before anything is made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpoint.model import checkpoint_lineage, load_head
from checkpoint.rehearsal import Outcome
from checkpoint.storage import Storage
from cli.main import main
from testbed.copying import copy_checkpoint
from testbed.restart import latest_batch
from tests.support.cli import CKPT, ckpt
from tests.support.files import files_of
from tests.support.rehearsal import CHECKPOINT, INPUT, QUERIES, RELEASE, SINK_MARK, rehearsed


def _private(corpus, tmp_path: Path, name: str = "long_chain") -> tuple[Path, Path, dict]:
    """A copy of the scenario's checkpoint, its input (where the query read it: a file source
    refuses another path), and what the checkpoint holds."""
    checkpoint = tmp_path / "checkpoint"
    copy_checkpoint(corpus[name], checkpoint)
    return checkpoint, corpus[name].parent / "input", files_of(checkpoint)


def test_a_function_that_raises_or_exits_is_an_outcome_of_its_own(spark, corpus, tmp_path, capsys,
                                                                 monkeypatch) -> None:  # fmt: skip
    """A `ValueError` was a traceback and exit 1 (the code of "state differs"); `SystemExit(3)` a
    silent exit 3. Each is now an outcome, its message in one line, its exit code documented."""
    checkpoint, inputs, before = _private(corpus, tmp_path)
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "raises")
    assert (code, doc["outcome"], doc["restarts"]) == (3, Outcome.CODE_RAISED, False), doc
    assert doc["code"] == {"outcome": "raised", "type": "ValueError",
                           "message": "no table 'orders' in the deployment's configuration"}  # fmt: skip
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "exits")
    assert (code, doc["outcome"], doc["code"]["message"]) == (4, Outcome.CODE_EXITED, "exit code 3"), doc
    assert not Path(doc["scratch"]).exists() and not doc["stores"]
    assert main(["rehearse", str(checkpoint), "--query", f"{QUERIES}:raises"]) == 3
    text = capsys.readouterr().out.splitlines()
    assert text[0].endswith(f": {Outcome.CODE_RAISED}") and "Traceback" not in "\n".join(text)
    assert text[1] == "the query's function: ValueError: no table 'orders' in the deployment's configuration"
    assert files_of(checkpoint) == before


def test_a_function_that_starts_its_query_runs_nothing_for_real(spark, corpus, tmp_path, capsys,
                                                              monkeypatch) -> None:  # fmt: skip
    """`q = writer.start(); q.awaitTermination()`, as Spark's examples end `main`, ran the production
    query on the production checkpoint: its sink ran the next batch there. `start` and `toTable`
    are refused while the function runs, however it handles what they raise."""
    checkpoint, inputs, before = _private(corpus, tmp_path)
    mark = tmp_path / "production-sink-ran"
    monkeypatch.setenv(SINK_MARK, str(mark))
    for query in ("starts_and_waits", "starts_and_swallows", "starts"):
        code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, query)
        assert (code, doc["outcome"]) == (5, Outcome.CODE_STARTED), (query, doc)
        assert "DataStreamWriter.start()" in doc["code"]["message"] and not doc["stopped_queries"]
        assert not mark.exists() and not spark.streams.active
        assert files_of(checkpoint) == before
    assert files_of(checkpoint) == before


def test_a_function_past_the_time_limit_is_an_outcome_and_leaves_nothing(spark, corpus, tmp_path, capsys,
                                                                         monkeypatch) -> None:  # fmt: skip
    checkpoint, inputs, before = _private(corpus, tmp_path)
    release = tmp_path / "release"
    monkeypatch.setenv(RELEASE, str(release))
    try:
        code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "hangs", "--timeout", "3s")
    finally:
        release.touch()  # the function's thread, left running, ends
    assert (code, doc["outcome"], doc["timed_out"]) == (6, Outcome.TIMED_OUT, "the query's function"), doc
    assert not Path(doc["scratch"]).exists() and not spark.streams.active
    assert files_of(checkpoint) == before
    hang = ["rehearse", str(checkpoint), "--query", f"{QUERIES}:hangs", "--timeout"]
    assert main([*hang, "0s"]) == 2 and "the time limit is 0.0, outside 1 to" in capsys.readouterr().err
    for bad in ("nan", "1e30d"):  # refused as the argument is read
        with pytest.raises(SystemExit) as exited:
            main([*hang, bad])
        assert exited.value.code == 2


def test_sigterm_and_sigint_remove_the_scratch(spark, corpus, tmp_path) -> None:
    """`ckpt rehearse` stopped by a signal while the function runs: the scratch and the folders made
    for it are gone, and the exit is the signal's (143, 130)."""
    checkpoint, inputs, before = _private(corpus, tmp_path)
    for sig, expected in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        scratch = tmp_path / f"scratch-{sig.name}" / "deeper"
        release = tmp_path / f"release-{sig.name}"
        env = {**os.environ, INPUT: str(inputs), CHECKPOINT: str(checkpoint), RELEASE: str(release),
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), *sys.path])}  # fmt: skip
        # SIGINT's default, as at a terminal: a suite started in the background by a shell without
        # job control ignores it, Python keeps it ignored, and only PySpark's handler, once its
        # session exists, takes it (one sent before then, under load, was lost: a hang).
        child = subprocess.Popen([CKPT, "rehearse", str(checkpoint), "--query", f"{QUERIES}:hangs",
                                  "--scratch-dir", str(scratch)], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            while not list(scratch.glob("ckpt-rehearsal-*/checkpoint/_ckpt_fork.complete.json")):
                assert child.poll() is None and time.monotonic() < deadline, child.communicate()
                time.sleep(0.2)
            time.sleep(3)  # Spark started, the function waits
            child.send_signal(sig)
            _, err = child.communicate(timeout=120)
        finally:
            release.touch()
            if child.poll() is None:
                child.kill()
        assert child.returncode == expected, err
        assert not scratch.parent.exists(), list(scratch.parent.rglob("*"))
        assert files_of(checkpoint) == before


def test_a_scratch_folder_inside_the_checkpoint_is_refused_before_anything_is_made(
    corpus, tmp_path, capsys
) -> None:
    """`--scratch-dir` inside the checkpoint exited 2 but left the folder (`mkdir -p` and `mkdtemp`
    ran before the overlap check); through a link to a folder inside, it wrote 425 files there."""
    checkpoint, _, before = _private(corpus, tmp_path)
    (checkpoint / "spare").mkdir()
    link = tmp_path / "scratch"
    link.symlink_to(checkpoint / "spare")
    for where, said in ((checkpoint / "scratch" / "deeper", "the scratch folder and the source overlap"),
                        (link / "deeper", "resolves to")):  # fmt: skip
        code = main(
            ["rehearse", str(checkpoint), "--query", f"{QUERIES}:aggregation", "--scratch-dir", str(where)]
        )
        err = capsys.readouterr().err
        assert code == 2 and said in err and err.count("\n") == 1, err
    assert not (checkpoint / "scratch").exists() and not any((checkpoint / "spare").iterdir())
    assert files_of(checkpoint) == before


def test_what_recovery_reads_after_the_batch_is_the_checkpoints_own(spark, corpus, tmp_path, capsys,
                                                                   monkeypatch) -> None:  # fmt: skip
    """The rehearsal's session (its maintenance every 200 ms, its snapshot settings, none of which an
    offset pins) snapshotted the scratch: "longest chain 0" for a checkpoint whose chain is 29.
    The figures after the batch are the checkpoint's own at that batch."""
    checkpoint, inputs, before = _private(corpus, tmp_path)
    batch = latest_batch(checkpoint)
    lineage = checkpoint_lineage(load_head(Storage(str(checkpoint)), strict=False), batch)
    longest = max(e.chain_length for e in lineage)
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "aggregation")
    assert (code, doc["outcome"]) == (0, Outcome.EQUAL), doc
    assert longest > 10 and doc["max_chain_length"] == longest, (longest, doc["max_chain_length"])
    assert json.dumps(doc)  # the document as --json prints it
    assert files_of(checkpoint) == before


def test_a_query_started_past_the_writer_or_later_from_its_thread_is_said(spark, corpus, tmp_path, capsys,
                                                                          monkeypatch) -> None:  # fmt: skip
    """The review's ways round the guard: a query started through the JVM's writer (py4j's call is
    refused too, so nothing runs), and a thread the function leaves behind that starts the
    production query once it has returned (refused: the guard stays up for the whole rehearsal,
    and for that thread after)."""
    checkpoint, inputs, before = _private(corpus, tmp_path)
    mark = tmp_path / "production-sink-ran"
    monkeypatch.setenv(SINK_MARK, str(mark))
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "starts_past_the_writer_and_stops_it")
    assert (code, doc["outcome"]) == (5, Outcome.CODE_STARTED), doc
    assert "DataStreamWriter.start()" in doc["code"]["message"]
    assert not (tmp_path / "checkpoint-elsewhere").exists()  # refused: it never started
    code, doc = rehearsed(capsys, monkeypatch, checkpoint, inputs, "starts_later_in_a_thread")
    assert (code, doc["outcome"]) == (5, Outcome.CODE_STARTED), doc
    assert "after it returned (refused)" in doc["code"]["message"]
    time.sleep(3)  # the thread is done: it started nothing
    assert not mark.exists() and not spark.streams.active
    assert files_of(checkpoint) == before


def test_a_function_that_stops_the_session_or_a_scratch_that_cannot_be_made_is_said(corpus, tmp_path) -> None:
    """`spark.stop()` in the function was a traceback and exit 1; a `--scratch-dir` that is a file,
    or below one, was a traceback too. In a process of its own (its session is stopped)."""
    checkpoint, inputs, before = _private(corpus, tmp_path)
    env = {INPUT: str(inputs), CHECKPOINT: str(checkpoint), "PYTHONPATH": str(Path(__file__).parents[2])}
    query = ["--query", f"{QUERIES}:stops_the_session"]
    out = ckpt("rehearse", str(checkpoint), *query, "--json", env=env, timeout=300)
    assert out.returncode == 3, out.stderr[-2000:]
    assert json.loads(out.stdout)["code"]["message"] == "it stopped the Spark session the rehearsal runs in"
    (tmp_path / "a-file").write_text("x")
    for where in (tmp_path / "a-file", tmp_path / "a-file" / "below"):
        out = ckpt("rehearse", str(checkpoint), *query, "--scratch-dir", str(where), env=env)
        assert out.returncode == 2 and "the scratch folder cannot be made there" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    out = ckpt("rehearse", str(checkpoint), "--query", "no_such_module:main", env=env)
    assert out.returncode == 2 and "No module named 'no_such_module'" in out.stderr, out.stderr
    assert files_of(checkpoint) == before
