"""An idle tick of the commit sensor costs one listing a checkpoint on every object store, counted
at the store's proxy, whatever a checkpoint's history (`tests/support/histories.py`: two that
differ only in older history; the read paths' costs on them: tests/checkpoint/test_history_on_*.py)."""

from __future__ import annotations

import json

from tests.support.runs import checkpoints_of
from tests.support.s3 import root_options


def test_an_idle_tick_on_s3_is_one_listing_per_checkpoint(s3, s3_histories) -> None:
    import dagster as dg

    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration.due import SensorState
    from orchestration.sensors import checkpoint_commit_sensor

    _, proxy, bucket = s3
    roots = CheckpointRootsResource(
        roots=[CheckpointRoot(name="s3", url=f"s3://{bucket}/histories", storage_options=root_options(s3))]
    )
    keys = [partition_key("s3", name) for name in s3_histories]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", keys + ["s3:gone"])

        def tick(cursor):
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            return ctx, checkpoint_commit_sensor(ctx)

        _, first = tick(json.dumps({"s3:removed-since": 3}))
        assert isinstance(first, dg.SensorResult)
        assert sorted(k for r in first.run_requests for k in checkpoints_of(r)) == sorted(keys)
        assert set(SensorState.from_json(first.cursor).seen) == set(keys)  # the removed one left
        proxy.reset()
        _, idle = tick(first.cursor)
        assert isinstance(idle, dg.SkipReason)
        # One LIST per checkpoint (the missing one's listing is empty): nothing else at all.
        assert proxy.counts() == {"ListObjectsV2": len(keys) + 1}
        assert sorted(r.target for r in proxy.requests) == sorted(
            f"{bucket}/histories/{name}/commits/" for name in [*s3_histories, "gone"]
        )


def test_an_idle_tick_on_azure_and_gcs_is_one_listing_per_checkpoint(histories) -> None:
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
