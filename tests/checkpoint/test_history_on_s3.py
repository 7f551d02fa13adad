"""Two checkpoints on S3 that differ only in older history (`testbed.synthetic`: 35 and 155
versions a store) cost the same requests, counted at the proxy, for every reader: `ckpt lineage`,
`validate` and `--deep`, a fork and a rehearsal's scratch fork (the commit sensor's idle tick:
tests/orchestration/test_idle_tick_on_stores.py). A read costs what Spark's recovery reads, not
what the checkpoint holds; on local disk the same holds call for call
(`tests/checkpoint/model/test_head.py`)."""

from __future__ import annotations

import json

import pytest

from checkpoint.storage import Storage
from tests.support.s3 import cli, direct, via_proxy


@pytest.mark.parametrize("command", [["lineage"], ["validate"], ["validate", "--deep"]])
def test_requests_do_not_grow_with_history(s3, s3_histories, command) -> None:
    _, proxy, _ = s3
    counts = {}
    for name, url in s3_histories.items():
        proxy.reset()
        out = cli(proxy, *command, url, "--json")
        assert out.returncode in (0, 1), out.stderr
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["GetObject"] > 0, counts


def test_a_fork_reads_what_recovery_reads_not_the_history(s3, s3_histories) -> None:
    from tests.support.forking import fork

    _, proxy, bucket = s3
    options = via_proxy(s3)
    counts, results = {}, {}
    for name, url in s3_histories.items():
        proxy.reset()
        results[name] = fork(Storage(url, options), Storage(f"s3://{bucket}/history-forks/{name}", options))
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["CopyObject"] > 0, counts
    assert results["small"].files == results["big"].files


def test_a_rehearsal_scratch_reads_what_recovery_reads_not_the_history(s3, s3_histories, tmp_path) -> None:
    """The rehearsal's scratch fork (at N-1, with N's offsets and source logs) from S3 to local disk:
    the same requests for two checkpoints that differ only in history."""
    from checkpoint.rehearsal.scratch import scratch_fork
    from checkpoint.safety import TwoSided, taken_at_once

    _, proxy, _ = s3
    counts, files = {}, {}
    for name, url in s3_histories.items():
        proxy.reset()
        request = TwoSided(Storage(url, via_proxy(s3)), Storage(str(tmp_path / name)), taken_at_once("tests"))
        scratch = scratch_fork(request)
        counts[name], files[name] = proxy.counts(), scratch.fork.files + scratch.planned_files
    assert counts["small"] == counts["big"] and counts["small"]["GetObject"] > 0, counts
    assert files["small"] == files["big"]


def test_the_fleet_view_lists_no_dormant_checkpoint_unless_asked(s3, s3_histories) -> None:
    """Two dormant checkpoints that differ only in history cost `ckpt fleet` the same requests:
    what a dormant one holds is what its audit trail knows, and only `--held` lists it (once per
    dormancy: the view after that reads it from the trail)."""
    import time

    _, proxy, bucket = s3
    time.sleep(1.1)  # their files were written at least this long ago: dormant after 1 s

    def view(*extra: str) -> tuple[dict, dict[str, dict]]:
        counts = {}
        for name, url in s3_histories.items():
            proxy.reset()
            out = cli(proxy, "fleet", url, "--dormant-after", "1s", "--json", *extra)
            assert out.returncode == 0, out.stderr
            counts[name] = proxy.counts()
            (row,) = json.loads(out.stdout)["checkpoints"]
            assert row["dormant_since"] is not None, row
            counts[name + "-row"] = row
        return counts, {n: counts.pop(n + "-row") for n in s3_histories}

    counts, rows = view()
    assert counts["small"] == counts["big"] and all(r["bytes_held"] is None for r in rows.values()), counts
    listed, rows = view("--held")
    for name in s3_histories:  # `--held` lists each, a folder at a time: more requests than the view
        assert listed[name]["ListObjectsV2"] > counts[name]["ListObjectsV2"], (listed, counts)
    fs = direct(s3)
    for name, row in rows.items():
        found = fs.find(f"{bucket}/histories/{name}", detail=True)
        assert (row["files_held"], row["bytes_held"]) == (len(found), sum(e["size"] for e in found.values()))
    again, rows = view()
    assert again["small"] == again["big"] and all(r["bytes_held"] for r in rows.values()), again
