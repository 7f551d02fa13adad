"""Two checkpoints on Azure Blob Storage (Azurite) and on GCS (the emulator), each behind its
counting proxy, that differ only in older history (`testbed.synthetic`: 35 and 155 versions a
store) cost the same requests for every reader, as on S3 (`test_history_on_s3.py`): `ckpt
lineage`, `validate` and `--deep`, a fork, the fleet view, and an idle tick of the commit sensor
(one listing a checkpoint)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from checkpoint.storage import Storage
from testbed.copying import hadoop_checksum
from tests.support.cli import ckpt
from tests.support.runs import checkpoints_of


@pytest.fixture(scope="module", params=["azure", "gcs"])
def histories(request) -> dict:
    """On one store: `small` and `big`, in a folder of their own, written once past the proxy and
    only read; the store's protocol, the folder, and its proxy."""
    from testbed import synthetic

    server, proxy, container = request.getfixturevalue(request.param)
    protocol = {"azure": "az", "gcs": "gs"}[request.param]
    fs, base = server.filesystem(), f"{container}/histories-{uuid.uuid4().hex[:8]}"
    urls = {}
    for name, versions in (("small", 35), ("big", 155)):
        # Two stores (the emulator takes each object in turn); as the connectors write them: no
        # Hadoop checksums.
        content = synthetic.files(2, versions, window=20)
        fs.pipe({f"{base}/{name}/{rel}": data for rel, data in content.items() if not hadoop_checksum(rel)})
        urls[name] = f"{protocol}://{base}/{name}"
    return {"urls": urls, "protocol": protocol, "container": container, "base": base, "proxy": proxy}


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


def test_an_idle_commit_sensor_tick_is_one_listing_per_checkpoint(histories) -> None:
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration.due import SensorState
    from orchestration.sensors import checkpoint_commit_sensor

    proxy, urls = histories["proxy"], histories["urls"]
    base = f"{histories['protocol']}://{histories['base']}"
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="st", url=base)])
    keys = [partition_key("st", name) for name in urls]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", keys + ["st:gone"])

        def tick(cursor):
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            return checkpoint_commit_sensor(ctx)

        first = tick(json.dumps({"st:removed-since": 3}))
        assert isinstance(first, dg.SensorResult)
        assert sorted(k for r in first.run_requests for k in checkpoints_of(r)) == sorted(keys)
        assert set(SensorState.from_json(first.cursor).seen) == set(keys)
        proxy.reset()
        idle = tick(first.cursor)
        assert isinstance(idle, dg.SkipReason)
        # One listing per checkpoint (the missing one's is empty): nothing else at all.
        assert proxy.counts() == {"list": len(keys) + 1}, proxy.requests
        folder = histories["base"].partition("/")[2]
        assert sorted(r.prefix for r in proxy.requests) == sorted(
            f"{folder}/{name}/commits/" for name in [*urls, "gone"]
        )


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
