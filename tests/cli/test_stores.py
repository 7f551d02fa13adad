"""The CLI on a store it cannot reach or may not write: botocore's missing credentials are one line;
a protocol outside the proven ones (local, S3, Azure, GCS) is refused in one line naming them, read
with a read-only command's `--unproven-storage`, and every command that writes is refused before it
writes anything, there or beside its other side (the storage's own refusals:
tests/checkpoint/storage/test_storage.py)."""

from __future__ import annotations

import json
import os

import fsspec

from checkpoint.storage import UNPROVEN_LEAVE
from cli.main import main
from testbed.copying import copy_checkpoint


def test_a_store_without_credentials_is_one_line(monkeypatch, capsys) -> None:
    """botocore's own errors (no credentials anywhere) are the one line an unreadable store gets,
    exit 2, not a traceback."""
    import s3fs

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    s3fs.S3FileSystem.clear_instance_cache()
    assert main(["inspect", "s3://bucket/ckpt"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NoCredentialsError" in err and "Traceback" not in err, err
    s3fs.S3FileSystem.clear_instance_cache()


def test_a_store_no_test_runs_against_is_refused_or_read_with_leave_and_never_written(
    monkeypatch, in_memory, corpus, tmp_path, capsys
) -> None:
    monkeypatch.delenv(UNPROVEN_LEAVE, raising=False)  # restored unset after `main` sets it
    url = in_memory("join")
    memory = fsspec.filesystem("memory")
    before = {p: memory.cat(p) for p in memory.find(url[len("memory://") :])}
    assert main(["validate", url]) == 2 and "not a proven store" in capsys.readouterr().err
    assert main(["validate", url, "--unproven-storage", "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["ok"] is True
    # The leave the read-only command set stays set in this process: what follows is refused with
    # it, as a store nothing writes to, not as one that may not be read.
    assert os.environ.get(UNPROVEN_LEAVE) == "1"
    quick = ["--grace", "1s", "--unsafe-short-grace", "--quiet-period", "1s", "--unsafe-short-quiet-period"]
    assert main(["gc", url, *quick, "--query-stopped", "--apply"]) == 2
    assert "nothing writes there" in capsys.readouterr().err
    # Plans no apply could carry out, refused before they are written: a cleanup's of the store,
    # a retirement's with its archive there.
    assert main(["gc", url, *quick, "--query-stopped", "--audit", str(tmp_path / "trail")]) == 2
    assert "nothing writes there" in capsys.readouterr().err and not (tmp_path / "trail").exists()
    dormant = copy_checkpoint(corpus["join"], tmp_path / "dormant")
    assert main(["retire", str(dormant), "--archive", "memory://archive-here/q", "--dormant-after", "1s",
                 "--unsafe-short-grace"]) == 2  # fmt: skip
    assert "nothing writes there" in capsys.readouterr().err and not (dormant / "_ckpt_audit").exists()
    assert not (tmp_path / "_ckpt_audit").exists() and not memory.exists("/archive-here")
    source = copy_checkpoint(corpus["join"], tmp_path / "source")
    assert main(["fork", str(source), "memory://fork-here/q"]) == 2
    assert "nothing writes there" in capsys.readouterr().err
    assert {p: memory.cat(p) for p in memory.find(url[len("memory://") :])} == before
    assert not memory.exists("/fork-here") and not (source / "_ckpt_audit").exists()
