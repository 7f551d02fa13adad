"""Two checkpoints on Azure Blob Storage (Azurite, behind the counting proxy) that differ only in
older history (`testbed.synthetic`: 35 and 155 versions a store) cost the same requests for every
reader, as on S3 (`test_history_on_s3.py`): `ckpt lineage`, `validate` and `--deep`, a fork, the
fleet view, and an idle tick of the commit sensor (one listing a checkpoint).

The GCS emulator serves a few requests a second, too slow for two histories in the suite: GCS's
counts are by hand (docs/storage.md)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from checkpoint.storage import Storage
from testbed.copying import hadoop_checksum
from tests.support.cli import ckpt
from tests.support.runs import checkpoints_of


@pytest.fixture(scope="module")
def azure_histories(azure) -> dict[str, str]:
    """`small` and `big`, in a folder of their own, written once past the proxy; only read."""
    from testbed import synthetic

    server, _, container = azure
    fs, base = server.filesystem(), f"{container}/histories-{uuid.uuid4().hex[:8]}"
    urls = {}
    for name, versions in (("small", 35), ("big", 155)):
        content = synthetic.files(4, versions, window=20)  # as abfs writes it: no Hadoop checksums
        fs.pipe({f"{base}/{name}/{rel}": data for rel, data in content.items() if not hadoop_checksum(rel)})
        urls[name] = f"az://{base}/{name}"
    return urls


@pytest.mark.parametrize("command", [["lineage"], ["validate"], ["validate", "--deep"]])
def test_requests_do_not_grow_with_history(azure, azure_histories, command) -> None:
    _, proxy, _ = azure
    counts = {}
    for name, url in azure_histories.items():
        proxy.reset()
        out = ckpt(*command, url, "--json")
        assert out.returncode in (0, 1), out.stderr[-2000:]
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["get"] > 0, counts


def test_a_fork_reads_what_recovery_reads_not_the_history(azure, azure_histories) -> None:
    """Within the store a fork copies server-side (Copy Blob): the same requests for both."""
    from tests.support.forking import fork

    _, proxy, container = azure
    counts, results = {}, {}
    for name, url in azure_histories.items():
        proxy.reset()
        results[name] = fork(Storage(url), Storage(f"az://{container}/history-forks-{uuid.uuid4().hex[:8]}"))
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"] and counts["small"]["copy"] > 0, counts
    assert results["small"].files == results["big"].files


def test_an_idle_commit_sensor_tick_is_one_listing_per_checkpoint(azure, azure_histories) -> None:
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration.due import SensorState
    from orchestration.sensors import checkpoint_commit_sensor

    _, proxy, _ = azure
    base = next(iter(azure_histories.values())).rpartition("/")[0]
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="az", url=base)])
    keys = [partition_key("az", name) for name in azure_histories]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", keys + ["az:gone"])

        def tick(cursor):
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            return checkpoint_commit_sensor(ctx)

        first = tick(json.dumps({"az:removed-since": 3}))
        assert isinstance(first, dg.SensorResult)
        assert sorted(k for r in first.run_requests for k in checkpoints_of(r)) == sorted(keys)
        assert set(SensorState.from_json(first.cursor).seen) == set(keys)
        proxy.reset()
        idle = tick(first.cursor)
        assert isinstance(idle, dg.SkipReason)
        # One List Blobs per checkpoint (the missing one's is empty): nothing else at all.
        assert proxy.counts() == {"list": len(keys) + 1}, proxy.requests
        folder = base.removeprefix("az://").partition("/")[2]
        assert sorted(r.prefix for r in proxy.requests) == sorted(
            f"{folder}/{name}/commits/" for name in [*azure_histories, "gone"]
        )


def test_the_fleet_view_costs_the_same_whatever_the_history(azure, azure_histories) -> None:
    """Two dormant checkpoints that differ only in history: `ckpt fleet` sends the same requests,
    and lists neither whole (what a dormant one holds is left to `--held`)."""
    _, proxy, _ = azure
    time.sleep(1.1)  # written at least this long ago: dormant after 1 s
    counts = {}
    for name, url in azure_histories.items():
        proxy.reset()
        out = ckpt("fleet", url, "--dormant-after", "1s", "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        (row,) = json.loads(out.stdout)["checkpoints"]
        assert row["dormant_since"] is not None and row["bytes_held"] is None, row
        counts[name] = proxy.counts()
    assert counts["small"] == counts["big"], counts
