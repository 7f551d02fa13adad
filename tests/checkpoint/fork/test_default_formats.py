"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`), forked at a batch and restarted alone like the original; a file
that fails its read stops the fork."""

from __future__ import annotations

import json
import shutil

import pytest

from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import checkpoint_lineage
from testbed.copying import copy_checkpoint
from tests.support.cli import ckpt
from tests.support.defaults import V1_SESSION, copy_default

FORKED = {"hdfs_agg": 15, "hdfs_join": 3, "rocksdb_v1": 5, "rocksdb_v1_changelog": 15}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FORKED))
def test_a_fork_at_an_earlier_batch_restarts_alone_like_the_original(
    ports, spark, defaults, tmp_path, name
) -> None:
    """Exactly what recovery at the batch reads, checked as Spark reads it (V1 has no sidecars);
    with its source deleted, the fork replays the later batches one by one and ends in the state
    of an untouched copy restarted with the same input."""
    from testbed.defaults import scenario_named
    from testbed.recovery import recovery_files
    from tests.support.files import files_of
    from tests.support.state import restart_like_untouched

    batch = FORKED[name]
    src, untouched, dest = tmp_path / "src", tmp_path / "untouched", tmp_path / "dest"
    copy_checkpoint(defaults[name], src)
    copy_checkpoint(defaults[name], untouched)
    out = ckpt(
        "fork", str(src), str(dest), "--batch", str(batch), "--audit", str(tmp_path / "audit"), "--json"
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    expected = set(recovery_files(src, batch))
    assert files_of(dest).keys() == expected | {"_ckpt_fork.json", "_ckpt_fork.complete.json"}
    assert (doc["files"], doc["batch"]) == (len(expected), batch)
    assert ckpt("validate", str(dest)).returncode == 0
    shutil.rmtree(src)
    scenario = scenario_named(name)
    with ports.confs(V1_SESSION):
        final = restart_like_untouched(
            spark, scenario, defaults[name].parent, dest, untouched, tmp_path / "more", max_files=1
        )
    assert final == scenario.batches


def test_a_v1_file_that_fails_its_read_stops_the_fork_before_any_log(defaults, tmp_path) -> None:
    """No sidecar to compare with: the copy is decoded as Spark's load decodes it, and a damaged
    delta stops the fork in its first step, DEST marked incomplete, no offset or commit written."""
    src = copy_default(defaults, "hdfs_agg", tmp_path)
    victim = src / checkpoint_lineage(load_checkpoint(str(src)))[0].chain[0].rel
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    dest = tmp_path / "dest"
    out = ckpt("fork", str(src), str(dest), "--audit", str(tmp_path / "audit"))
    assert out.returncode == 1 and "incomplete" in out.stderr, out.stderr
    assert not (dest / "offsets").exists() and not (dest / "commits").exists()
    refused = ckpt("validate", str(dest))
    assert refused.returncode != 0 and "an interrupted fork, not a checkpoint yet" in refused.stderr
