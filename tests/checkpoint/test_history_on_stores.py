"""Two checkpoints on Azure Blob Storage (Azurite) and on GCS (the emulator), each behind its
counting proxy, that differ only in older history (`testbed.synthetic`: 35 and 155 versions a
store) cost the same requests for every reader, as on S3 (`test_history_on_s3.py`): `ckpt
lineage`, `validate` and `--deep`, a fork and the fleet view (the commit sensor's idle tick:
tests/orchestration/test_idle_tick_on_stores.py)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from checkpoint.storage import Storage
from tests.support.cli import ckpt


@pytest.mark.parametrize("command", [["lineage"], ["validate"], ["validate", "--deep"]])
def test_requests_do_not_grow_with_history(histories, command) -> None:
    proxy, counts = histories["proxy"], {}
    for name, url in histories["urls"].items():
        proxy.reset()
        out = ckpt(*command, url, "--json", timeout=600)
        assert out.returncode in (0, 1), out.stderr[-2000:]
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["get"] > 0, counts


def test_a_fork_reads_what_recovery_reads_not_the_history(histories) -> None:
    """Within the store a fork copies server-side (Copy Blob; GCS's rewrite): the same requests
    for both."""
    from tests.support.forking import fork

    proxy, counts, results = histories["proxy"], {}, {}
    for name, url in histories["urls"].items():
        proxy.reset()
        dest = f"{histories['protocol']}://{histories['container']}/history-forks-{uuid.uuid4().hex[:8]}"
        results[name] = fork(Storage(url), Storage(dest))
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["copy"] > 0, counts
    assert results["small"].files == results["big"].files


def test_the_fleet_view_costs_the_same_whatever_the_history(histories) -> None:
    """Two dormant checkpoints that differ only in history: `ckpt fleet` sends the same requests,
    and lists neither whole (what a dormant one holds is left to `--held`)."""
    proxy, counts = histories["proxy"], {}
    time.sleep(1.1)  # written at least this long ago: dormant after 1 s
    for name, url in histories["urls"].items():
        proxy.reset()
        out = ckpt("fleet", url, "--dormant-after", "1s", "--json", timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        (row,) = json.loads(out.stdout)["checkpoints"]
        assert row["dormant_since"] is not None and row["bytes_held"] is None, row
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"], counts
