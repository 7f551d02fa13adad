"""The `retire_checkpoints` job as Dagster runs it, on Azure Blob Storage (Azurite) and on GCS (the
emulator behind the proxy that keeps GCS's create precondition): discovery finds the checkpoints
on the store and the commit sensor looks at them there; a launch plans a dormant one's retirement
and refuses a live one; a second launch after the grace archives it on the store and deletes it;
and the next discovery tick drops its partition. An upload is new to the store, which dates it, so
the deployment's dormancy is some seconds (`unsafe_floors`, as for a trial): one checkpoint is
uploaded that long before the other."""

from __future__ import annotations

import time
import uuid

import pytest

from checkpoint.analysis import Severity, validate
from checkpoint.model.head import load_head
from checkpoint.storage import Storage
from testbed.azurite import ACCOUNT
from testbed.copying import upload_checkpoint

pytestmark = pytest.mark.slow


def _store(request, name: str) -> tuple[object, str, str]:
    """(a client straight to the server, the URL protocol, a folder of this test's own)."""
    if name == "azure":
        server, _, container = request.getfixturevalue("azure")
        return server.filesystem(), "az", f"{container}/{uuid.uuid4().hex[:8]}"
    server, proxy, bucket = request.getfixturevalue("gcs")
    return server.filesystem(proxy.endpoint), "gs", f"{bucket}/{uuid.uuid4().hex[:8]}"


def _spark_url(protocol: str, where: str) -> str:
    """`container/key` or `bucket/key` as Spark's connector names it in a checkpoint."""
    if protocol == "gs":
        return f"gs://{where}"
    container, _, key = where.partition("/")
    return f"abfss://{container}@{ACCOUNT}.dfs.core.windows.net/{key}"


@pytest.mark.parametrize("name", ["azure", "gcs"])
def test_the_retire_job_archives_a_dormant_checkpoint_on_the_store_and_discovery_drops_it(
    request, corpus, name: str
) -> None:
    import dagster as dg

    from assets.partitions import CHECKPOINTS, partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration.due import SensorState
    from orchestration.location import build_definitions
    from orchestration.sensors import checkpoint_commit_sensor
    from tests.assets.test_dagster import _tick

    fs, protocol, base = _store(request, name)

    def upload(folder: str) -> None:
        where = f"{base}/prod/{folder}"
        upload_checkpoint(fs, corpus["two_actions"], where, protocol, _spark_url(protocol, where))

    began = time.monotonic()
    upload("orders")
    # Alive for a while after its upload, whatever the emulator's pace: the other one is uploaded
    # as slowly, and the launches that must find it alive take a few seconds.
    dormant = round(2 * (time.monotonic() - began)) + 20
    time.sleep(dormant + 1)  # dormant now, as the store dates it
    upload("clicks")
    prod = CheckpointRoot(name="prod", url=f"{protocol}://{base}/prod")
    cold = CheckpointRoot(name="cold", url=f"{protocol}://{base}/cold")
    options = {"dormant_after": f"{dormant}s", "retire_grace": "1s", "unsafe_floors": True}
    job = build_definitions([prod, cold], **options).resolve_job_def("retire_checkpoints")
    key, alive = partition_key("prod", "orders"), partition_key("prod", "clicks")

    def launch(instance, config: dict) -> dg.ExecuteInProcessResult:
        run_config, user = {"ops": {"retire": {"config": config}}}, {"dagster/user": "ana@example.com"}
        return job.execute_in_process(
            run_config=run_config, instance=instance, tags=user, raise_on_error=False
        )

    def failure(result: dg.ExecuteInProcessResult) -> str:
        return str(
            next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data
        )

    roots = CheckpointRootsResource(roots=[prod], **options)
    with dg.instance_for_test() as instance:
        _tick(instance, roots)
        assert set(instance.get_dynamic_partitions(CHECKPOINTS)) == {key, alive}
        # The commit sensor's first look at both, on the store, as the daemon evaluates it.
        context = dg.build_sensor_context(instance=instance, resources={"roots": roots})
        looked = checkpoint_commit_sensor(context)
        cursor = looked.cursor if isinstance(looked, dg.SensorResult) else context.cursor
        assert set(SensorState.from_json(cursor).seen) == {key, alive}
        refused = launch(instance, {"plan": [key, alive], "archive_root": cold.url})
        assert not refused.success and f"{alive}: " in failure(refused) and "not dormant" in failure(refused)

        planned = launch(instance, {"plan": [key], "archive_root": cold.url})
        assert planned.success, failure(planned)
        plan_id = planned.output_for_node("retire")[0]["plan_id"]
        assert fs.exists(f"{base}/prod/orders/metadata")  # planning deletes nothing
        time.sleep(1.1)  # the grace
        applied = launch(instance, {"apply": [{"partition": key, "plan_id": plan_id}]})
        assert applied.success, failure(applied)
        assert applied.output_for_node("retire")[0]["approved_by"].startswith("ana@example.com (dagster run ")
        fs.invalidate_cache()
        assert not [
            p for p, info in fs.find(f"{base}/prod/orders", detail=True).items() if info["type"] == "file"
        ]
        assert fs.exists(f"{base}/prod/clicks/metadata")
        archive = load_head(Storage(f"{cold.url}/orders"), strict=True)
        assert not [f for f in validate(archive).findings if f.severity == Severity.ERROR]
        _tick(instance, roots)  # discovery drops the partition of a checkpoint gone
        assert set(instance.get_dynamic_partitions(CHECKPOINTS)) == {alive}
