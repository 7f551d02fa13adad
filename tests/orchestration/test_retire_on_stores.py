"""The `retire_checkpoints` job as Dagster runs it, on Azure Blob Storage (Azurite) and on GCS (the
emulator behind the proxy that keeps GCS's create precondition), with discovery and the commit
sensor's first look evaluated as the daemon evaluates them, over the deployment's own roots. A
launch refuses a live checkpoint; one plans a dormant one's retirement; one after the grace archives
it on the store, records each step in its audit trail there and deletes it with the folder markers
Spark's connector writes, leaving its neighbour as it was; and the next discovery tick drops its
partition and finds the archive under its root. An upload is new to the store, which dates it:
the launch that must find the live checkpoint alive runs on the wall clock, and the plan and the
apply on a clock moved past the deployment's dormancy (`tests.support.clock`), where the grace
has passed too."""

from __future__ import annotations

from checkpoint.analysis import Severity, validate
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.head import load_head
from checkpoint.safety import AuditTrail, folder_name
from checkpoint.storage import Storage
from testbed.copying import hadoop_checksum, upload_checkpoint
from tests.support.clock import ShiftedTime

DORMANT = 3600  # the deployment's dormancy, in seconds: an hour, far longer than the test


def _objects(fs, prefix: str) -> dict[str, int]:
    """Every object under `prefix` (a folder marker too), by name, with its size."""
    fs.invalidate_cache()
    return {p: info.get("size", 0) for p, info in fs.find(prefix, withdirs=True, detail=True).items()}


def test_the_retire_job_archives_a_dormant_checkpoint_on_the_store_and_discovery_drops_it(
    cloud_store, corpus, monkeypatch
) -> None:
    import dagster as dg

    import checkpoint.retire.plan as retire_plan
    import orchestration.retire as retire_job
    from assets.partitions import CHECKPOINTS, partition_key
    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration.due import SensorState
    from orchestration.location import build_definitions
    from orchestration.sensors import checkpoint_commit_sensor
    from tests.support.assets import discovery_tick

    fs, protocol, base, spark_url = (cloud_store[k] for k in ("fs", "protocol", "base", "spark"))
    local = corpus["two_actions"]
    files = sum(1 for p in local.rglob("*") if p.is_file() and not hadoop_checksum(p.name))  # no marker

    def upload(folder: str) -> None:  # each folder marked, as Spark's connector for the store marks it
        where = f"{base}/prod/{folder}"
        upload_checkpoint(fs, local, where, protocol, spark_url(where), folder_markers=True)

    upload("orders")
    upload("orders-live")  # a name the dormant one's is a prefix of: a delete by prefix would show
    # The planner's and the apply's clock, moved past the dormancy once the live one has been
    # refused: both checkpoints are then dormant, and only the one planned is retired.
    clock = ShiftedTime()
    monkeypatch.setattr(retire_plan, "time", clock)
    monkeypatch.setattr(retire_job, "time", clock)
    prod = CheckpointRoot(name="prod", url=f"{protocol}://{base}/prod")
    cold = CheckpointRoot(name="cold", url=f"{protocol}://{base}/cold")
    options = {"dormant_after": f"{DORMANT}s", "retire_grace": "1s", "unsafe_floors": True}
    roots = CheckpointRootsResource(roots=[prod, cold], **options)  # the deployment's own
    job = build_definitions([prod, cold], **options).resolve_job_def("retire_checkpoints")
    key, alive = partition_key("prod", "orders"), partition_key("prod", "orders-live")

    def launch(instance, config: dict) -> dg.ExecuteInProcessResult:
        run_config, user = {"ops": {"retire": {"config": config}}}, {"dagster/user": "ana@example.com"}
        return job.execute_in_process(
            run_config=run_config, instance=instance, tags=user, raise_on_error=False
        )

    def failure(result: dg.ExecuteInProcessResult) -> str:
        return str(
            next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data
        )

    with dg.instance_for_test() as instance:
        discovery_tick(instance, roots)
        assert set(instance.get_dynamic_partitions(CHECKPOINTS)) == {key, alive}
        refused = launch(instance, {"plan": [alive], "archive_root": cold.url})
        assert not refused.success and f"{alive}: " in failure(refused) and "not dormant" in failure(refused)
        # The commit sensor's first look at both, on the store: each at its newest batch.
        context = dg.build_sensor_context(instance=instance, resources={"roots": roots})
        looked = checkpoint_commit_sensor(context)
        cursor = looked.cursor if isinstance(looked, dg.SensorResult) else context.cursor
        newest = load_checkpoint(str(local)).latest_committed_batch
        assert SensorState.from_json(cursor).seen == {key: newest, alive: newest}

        neighbour = _objects(fs, f"{base}/prod/orders-live")
        clock.offset = 2 * DORMANT
        planned = launch(instance, {"plan": [key], "archive_root": cold.url})
        assert planned.success, failure(planned)
        plan = planned.output_for_node("retire")[0]
        assert _objects(fs, f"{base}/prod/orders")  # planning deletes nothing
        clock.offset += 2  # past the grace
        applied = launch(instance, {"apply": [{"partition": key, "plan_id": plan["plan_id"]}]})
        assert applied.success, failure(applied)
        retired = applied.output_for_node("retire")[0]
        assert retired["approved_by"].startswith("ana@example.com (dagster run ")
        assert retired["deleted_files"] == plan["files"] == files and retired["archived_batch"] == newest

        assert _objects(fs, f"{base}/prod/orders") == {}  # nothing left, as a file or as a folder
        fs.invalidate_cache()  # and no marker of the checkpoint's own folder (`orders`, `orders/`)
        assert f"{base}/prod/orders" not in fs.ls(f"{base}/prod", detail=False)
        assert _objects(fs, f"{base}/prod/orders-live") == neighbour
        url = f"{prod.url}/orders"
        trail = AuditTrail(AuditTrail.default_for(url))
        steps = trail.records(f"{folder_name(Storage(url).url)}/{plan['plan_id']}.retire-outcomes.jsonl")
        assert steps[-1]["step"] == "retired" and steps[-1]["approved_by"] == retired["approved_by"]
        archived = load_head(Storage(f"{cold.url}/orders"), strict=True)
        assert (
            archived.latest_committed_batch == newest and archived.query_id == load_head(str(local)).query_id
        )
        assert not [f for f in validate(archived).findings if f.severity == Severity.ERROR]

        # The retired one's partition dropped; the archive, under its root, found.
        discovery_tick(instance, roots)
        assert set(instance.get_dynamic_partitions(CHECKPOINTS)) == {alive, partition_key("cold", "orders")}
