"""`ckpt inspect` through the installed console script, as a person runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CKPT = shutil.which("ckpt", path=str(Path(sys.executable).parent)) or "ckpt"


def ckpt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CKPT, *args], capture_output=True, text=True, timeout=120)


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
