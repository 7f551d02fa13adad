"""Dagster's assets on an S3 root: no credential stored, requests per checkpoint, not per file."""

from __future__ import annotations

import pytest

from tests.support.s3 import root_options, via_proxy


def test_dagster_assets_on_an_s3_root_never_leak_credentials(s3, s3_copy_of) -> None:
    import dagster as dg

    from assets.checkpoints import checkpoint_inventory, checkpoint_lineage_report
    from assets.cleanup import checkpoint_orphan_cleanup, checkpoint_orphan_plan
    from assets.partitions import partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource

    server, _, bucket = s3
    s3_copy_of("two_actions", prefix="dagster/team-a")
    options = root_options(s3)
    with pytest.raises(ValueError, match="holds a credential"):  # refused where Dagster would keep it
        CheckpointRoot(name="s3", url=f"s3://{bucket}/dagster", storage_options=via_proxy(s3))
    root = CheckpointRoot(name="s3", url=f"s3://{bucket}/dagster", storage_options=options)
    roots = CheckpointRootsResource(roots=[root], audit_url=f"s3://{bucket}/audit")
    key = partition_key("s3", "team-a/two_actions")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [key])
        assets = [checkpoint_inventory, checkpoint_lineage_report, checkpoint_orphan_plan]
        resources = {"roots": roots}
        assets.append(checkpoint_orphan_cleanup)
        result = dg.materialize(assets, partition_key=key, instance=instance, resources=resources)
        assert result.success
        plan = next(iter(result.asset_materializations_for_node("checkpoint_orphan_plan")))
        assert str(plan.metadata["manifest"].value).startswith(f"s3://{bucket}/audit/")
        # Everything Dagster stored about the run: events, metadata, logs, and the job snapshot
        # that the UI serves (it holds the resources' configuration).
        run = instance.get_run_by_id(result.run_id)
        stored = "\n".join(str(e) for e in instance.all_logs(result.run_id)) + str(run)
        stored += dg._serdes.serialize_value(instance.get_job_snapshot(run.job_snapshot_id))
    assert server.secret_key not in stored and "secret" not in stored.lower()
    assert "two_actions" in stored


def test_the_fleet_report_sends_requests_per_checkpoint_not_per_file(s3) -> None:
    """50 synthetic checkpoints, 5 of them with nearly three times the files of the others: the
    report costs each what one checkpoint of either kind costs alone, and no request more when it
    also tells whether a target Spark restarts each (the snapshots' metadata is read anyway)."""
    import dagster as dg

    from assets.fleet import checkpoint_fleet_report
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from testbed import synthetic

    server, proxy, bucket = s3
    # versions equal modulo 10 (the same replay chains); no hidden Hadoop crcs, as on S3
    content, kinds = {}, {"small": (22, 45), "big": (62, 5)}
    for name, (versions, count) in kinds.items():
        files = {r: d for r, d in synthetic.files(1, versions, window=2).items() if "/." not in f"/{r}"}
        for i in range(count):
            content.update({f"{bucket}/fleet/{name}-{i:03d}/{rel}": data for rel, data in files.items()})
    server.filesystem().pipe(content)
    root = CheckpointRoot(name="s3", url=f"s3://{bucket}/fleet", storage_options=root_options(s3))

    def report(keys: list[str], target: str | None = None):
        roots = CheckpointRootsResource(roots=[root], target_spark=target)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("checkpoints", keys)
            proxy.reset()
            result = dg.materialize([checkpoint_fleet_report], instance=instance, resources={"roots": roots})
            assert result.success
            (mat,) = result.asset_materializations_for_node("checkpoint_fleet_report")
            assert mat.metadata["checkpoints"].value == len(keys)
            assert target is None or mat.metadata["restart_on_target"].value == len(keys)
            return proxy.counts()

    small, big = report(["s3:small-000"]), report(["s3:big-000"])
    assert small == big and small["GetObject"] > 0, (small, big)
    assert report(["s3:big-000"], target="4.1") == big
    everything = report(sorted(f"s3:{n}-{i:03d}" for n, (_, count) in kinds.items() for i in range(count)))
    # One PUT a report, whatever the fleet: the whole table's CSV in the audit root.
    assert small["PutObject"] == everything["PutObject"] == 1, (small, everything)
    reads = {op: n for op, n in everything.items() if op != "PutObject"}
    assert reads == {op: 50 * n for op, n in small.items() if op != "PutObject"}, everything
