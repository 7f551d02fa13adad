"""`ckpt inspect` through the installed console script, as a person runs it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from tests.support.cli import CKPT, ckpt


def test_inspect_json_on_every_corpus_checkpoint(corpus, loaded) -> None:
    for name, path in corpus.items():
        out = ckpt("inspect", str(path), "--json")
        assert out.returncode == 0, (name, out.stderr)
        doc = json.loads(out.stdout)
        model = loaded[name]
        assert doc["path"] == str(path)
        assert doc["format_version"] == model.format_version
        assert doc["latest_planned_batch"] == model.latest_planned_batch
        assert doc["latest_committed_batch"] == model.latest_committed_batch
        assert [(o["id"], o["stores"], o["partitions"]) for o in doc["operators"]] == [
            (op.id, list(op.store_names), op.num_partitions) for op in model.operators.values()
        ]
        assert "unknown" not in doc["files"]
        assert doc["bytes"] == sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        assert sum(doc["files"].values()) == sum(1 for p in path.rglob("*") if p.is_file())


def test_inspect_human_output(corpus) -> None:
    out = ckpt("inspect", str(corpus["killed_before_restart"]))
    assert out.returncode == 0
    assert "latest planned 3, latest committed 2" in out.stdout
    assert "stateStoreSave" in out.stdout and "changelog" in out.stdout


def test_inspect_accepts_file_urls(corpus) -> None:
    out = ckpt("inspect", corpus["join"].as_uri(), "--json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["operators"][0]["stores"]) == 4


@pytest.mark.parametrize(
    "damage", ["missing", "not_a_checkpoint", "unknown_commit_version", "garbage_metadata"]
)
def test_inspect_errors_are_one_line_and_exit_2(copy_of, tmp_path, damage) -> None:
    if damage == "missing":
        target = tmp_path / "nope"
    elif damage == "not_a_checkpoint":
        target = tmp_path / "plain"
        target.mkdir()
        (target / "notes.txt").write_text("hello")
    elif damage == "unknown_commit_version":
        target = copy_of("snapshots")
        (target / "commits" / "4").write_text('v42\n{"nextBatchWatermarkMs":0}')
    else:
        target = copy_of("snapshots")
        (target / "metadata").write_bytes(b"\xff\xfe garbage")
    out = ckpt("inspect", str(target))
    assert out.returncode == 2, out
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: ") and "Traceback" not in out.stderr
    assert str(target) in lines[0]
    if damage == "unknown_commit_version":
        assert "commits/4" in lines[0] and "'v42'" in lines[0]


def test_lineage_json(corpus) -> None:
    out = ckpt("lineage", str(corpus["long_chain"]), "--json")
    assert out.returncode == 0, out.stderr
    stores = json.loads(out.stdout)["stores"]
    assert len(stores) == 4
    keys = {"operator", "partition", "store", "version", "unique_id", "snapshot_version", "chain_length",
            "replay_bytes", "lineage_header_bytes", "problem"}  # fmt: skip
    assert all(set(s) == keys for s in stores)
    assert {(s["version"], s["snapshot_version"], s["chain_length"]) for s in stores} == {(32, 0, 32)}
    older = json.loads(ckpt("lineage", str(corpus["long_chain"]), "--batch", "9", "--json").stdout)["stores"]
    assert {s["chain_length"] for s in older} == {10}
    missing = ckpt("lineage", str(corpus["long_chain"]), "--batch", "99")
    assert missing.returncode == 2 and "batch 99 is not in the commit log" in missing.stderr


def test_lineage_says_when_a_chain_cannot_be_read(copy_of) -> None:
    """A changelog of the chain gone: the store's chain is not shown as a healthy 0, the text says
    which store and why, the JSON has the reason, and the exit code says findings (1)."""
    path = copy_of("long_chain")
    gone = sorted((path / "state" / "0" / "1").glob("20_*.changelog"))
    assert gone
    gone[0].unlink()
    out = ckpt("lineage", str(path))
    assert out.returncode == 1, out.stderr
    assert "1 of 4 store(s) cannot be loaded at this batch:" in out.stdout
    assert "op 0 part 1 default: the chain needs 1 file(s) that do not exist (versions 20)" in out.stdout
    stores = json.loads(ckpt("lineage", str(path), "--json").stdout)["stores"]
    assert [s["partition"] for s in stores if s["problem"]] == [1]
    assert all(s["problem"] is None for s in stores if s["partition"] != 1)


def test_validate_exit_codes(corpus, copy_of, tmp_path) -> None:
    chain = copy_of("long_chain")
    date_to(chain, 8 * 3600)  # stopped, not dormant, however old the corpus
    healthy = ckpt("validate", str(chain), "--json")
    doc = json.loads(healthy.stdout)
    assert healthy.returncode == 0 and doc["ok"] is True
    assert {f["code"] for f in doc["findings"]} == {"LONG_REPLAY_CHAIN"}
    assert all(set(f) == {"severity", "code", "path", "message"} for f in doc["findings"])
    assert ckpt("validate", str(chain), "--long-chain", "50").stdout.strip() == "ok: no findings"

    damaged = copy_of("snapshots")
    (damaged / "commits" / "5").unlink()
    out = ckpt("validate", str(damaged), "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and doc["ok"] is False
    assert [f["code"] for f in doc["findings"]] == ["COMMIT_LOG_GAP"]
    human = ckpt("validate", str(damaged))
    assert human.returncode == 1 and "COMMIT_LOG_GAP" in human.stdout and "NOT OK: 1 error" in human.stdout

    unreadable = ckpt("validate", str(tmp_path / "nope"))
    assert unreadable.returncode == 2 and unreadable.stdout == ""


def test_scan_finds_checkpoints_at_any_depth(corpus, tmp_path) -> None:
    root = tmp_path / "root"
    copy_checkpoint(corpus["snapshots"], root / "team-a" / "orders")
    copy_checkpoint(corpus["join"], root / "team-b" / "deep" / "er" / "clicks")
    copy_checkpoint(corpus["watermark"], root / "team-b" / "broken")
    (root / "team-b" / "broken" / "commits" / "3").unlink()
    (root / "notes").mkdir()
    (root / "notes" / "metadata").write_text("not a checkpoint: no offsets beside it")
    out = ckpt("scan", str(root), "--json")
    assert out.returncode == 1, out.stderr  # one checkpoint has an error finding
    doc = json.loads(out.stdout)
    found = {c["path"][len(str(root)) + 1 :]: c for c in doc["checkpoints"]}
    assert sorted(found) == ["team-a/orders", "team-b/broken", "team-b/deep/er/clicks"]
    assert found["team-a/orders"]["health"] == "ok" and found["team-a/orders"]["latest_committed_batch"] == 11
    assert found["team-b/deep/er/clicks"]["health"] == "ok"
    assert found["team-b/broken"]["health"] == "error" and found["team-b/broken"]["errors"] == 1
    human = ckpt("scan", str(root))
    assert "team-b/deep/er/clicks" in human.stdout and "error" in human.stdout
    empty = ckpt("scan", str(root / "notes"))
    assert empty.returncode == 0 and "no checkpoints under" in empty.stdout


def _on_a_terminal(*args: str) -> tuple[subprocess.CompletedProcess, bytes]:
    """Runs ckpt with stderr on a pseudo-terminal, as a person at a shell sees it."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a person's terminal
    try:
        out = subprocess.run([CKPT, *args], stdout=subprocess.PIPE, stderr=slave, text=True, timeout=120)
    finally:
        os.close(slave)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: everything was read
            break
        if not chunk:
            break
        screen += chunk
    os.close(master)
    return out, screen


def test_long_work_shows_a_bar_on_a_terminal_and_log_lines_elsewhere(tmp_path) -> None:
    from testbed import synthetic

    path = tmp_path / "wide"
    synthetic.build(path, 120, 25, window=10)  # 120 stores: progress every 100
    out, screen = _on_a_terminal("lineage", str(path))
    assert out.returncode == 0 and "stores read" not in out.stdout
    assert b"stores read" in screen and b"100/120" in screen  # a bar, drawn at each report
    assert screen.endswith(b"\r") and screen.split(b"\r")[-2].strip() == b""  # cleared before the result
    quiet, screen = _on_a_terminal("lineage", str(path), "--json")
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["stores"] and screen == b""
    piped = ckpt("lineage", str(path))  # not a terminal: log lines, no bar
    lines = piped.stderr.splitlines()
    assert piped.returncode == 0 and len(lines) == 1
    assert re.fullmatch(f"ckpt: {re.escape(str(path))}: 100 of 120 stores read, \\d+ requests", lines[0])


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path) -> None:
    """`ckpt lineage PATH | head -5` ended in a BrokenPipeError traceback; a command-line tool exits
    quietly when its reader goes away, with the status SIGPIPE gives."""
    from testbed import synthetic

    synthetic.write_local(tmp_path / "wide", synthetic.files(2000, 2, window=2, snapshot_every=5))
    reader = subprocess.Popen([CKPT, "lineage", str(tmp_path / "wide")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)  # fmt: skip
    assert reader.stdout is not None and reader.stderr is not None
    head = [reader.stdout.readline() for _ in range(5)]
    # As `head -5` does: the rest of the 2,000 lines (120 KB, over a pipe's 64 KB) has nowhere to go.
    reader.stdout.close()
    status, stderr = reader.wait(timeout=120), reader.stderr.read().decode()
    assert len(head) == 5 and head[0].startswith(b"op")
    assert status == 141, (status, stderr[-2000:])
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr[-2000:]


@pytest.mark.unit
def test_an_unknown_target_spark_is_a_usage_error(capsys, tmp_path: Path) -> None:
    from cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["fleet", str(tmp_path), "--target-spark", "3.5"])
    assert exit_.value.code == 2 and "cover Spark 4.0" in capsys.readouterr().err


def test_the_suites_commands_run_with_their_own_environment_folder_and_limit(
    corpus, tmp_path, monkeypatch
) -> None:
    """`tests.support.cli.ckpt` forks each command from a process that imported the CLI once: a
    command still sees the environment and working folder of its call, not of the first one; it
    dies as a process would, status and all; a limit on its memory is its own; and one that
    outlives its time limit is killed, with the next command served as before."""
    import os
    import socket

    from checkpoint.crash import CRASH_ENV

    (tmp_path / "ckpt" / "commits").mkdir(parents=True)
    assert ckpt("lineage", "ckpt", cwd=tmp_path).stderr == ckpt("lineage", str(tmp_path / "ckpt")).stderr
    assert "no such directory" in ckpt("lineage", "ckpt").stderr  # this process's folder again
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "x")
    refused = ckpt("lineage", "s3://bucket/ckpt")
    assert refused.returncode == 2 and "AWS_MAX_ATTEMPTS='x'" in refused.stderr
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    copy_checkpoint(corpus["snapshots"], tmp_path / "src")
    crashed = ckpt(
        "fork", str(tmp_path / "src"), str(tmp_path / "dest"), env={CRASH_ENV: "fork.after_step:0"}
    )
    assert crashed.returncode == -9 and (tmp_path / "dest" / "state").is_dir()
    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
        with pytest.raises(subprocess.TimeoutExpired):
            ckpt("lineage", "s3://bucket/ckpt", timeout=2)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    deep = ("validate", str(corpus["long_chain"]), "--deep")  # its reading threads need memory
    assert ckpt(*deep, address_space=1 << 30).returncode == 0
    assert ckpt(*deep, address_space=1 << 20).returncode != 0  # the limit is the command's own
    again = ckpt("lineage", str(tmp_path / "ckpt"), "--json")
    assert (
        again.returncode in (0, 2)
        and again.stderr == ckpt("lineage", str(tmp_path / "ckpt"), "--json").stderr
    )
    assert os.environ.get("CKPT_TESTS_FORK_CLI", "1") == "0" or _forked_children_gone()


def _forked_children_gone() -> bool:
    """No child of the command helper is left running (the one killed at its limit was reaped), and
    a command whose environment changes what Python reads as it starts is not forked."""
    import os

    from tests.support.cli import _forker

    helper = _forker()
    assert helper is not None
    assert helper.serves(dict(os.environ)) and not helper.serves({**os.environ, "PYTHONPATH": "/elsewhere"})
    assert not helper.serves({**os.environ, "TZ": "Asia/Kolkata"})
    children = Path(f"/proc/{helper.process.pid}/task/{helper.process.pid}/children").read_text().split()
    return children == []
