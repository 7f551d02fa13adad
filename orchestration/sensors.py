"""Discovery: keeps one partition per checkpoint found under the configured roots."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import hashlib

import dagster as dg

from checkpoint.errors import CheckpointError
from orchestration.partitions import checkpoint_partitions, parse_partition_key
from orchestration.resources import CheckpointRootsResource
from orchestration.schedules import audit_job


def _root_of(key: str) -> str | None:
    try:
        return parse_partition_key(key)[0]
    except ValueError:
        return None  # not one of ours (added by hand): never removed


@dg.sensor(job=audit_job, minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.RUNNING)
def checkpoint_discovery_sensor(context: dg.SensorEvaluationContext, roots: CheckpointRootsResource):
    """Adds new checkpoints (and audits them), removes vanished ones.

    A root whose listing fails keeps its partitions: an outage must not look like deleted queries.
    Requests are computed against the instance's partitions, so a repeated tick requests nothing;
    the cursor is a digest of the discovered set, which shows in the UI when discovery changed.
    """
    existing = set(context.instance.get_dynamic_partitions(checkpoint_partitions.name))
    configured = {root.name for root in roots.roots}
    found: set[str] = set()
    listed: set[str] = set()
    for root in roots.roots:
        try:
            found |= set(roots.discover(root.name))
            listed.add(root.name)
        except CheckpointError as exc:
            context.log.warning(f"root {root.name!r} could not be listed, its partitions are kept: {exc}")
    ours = {key for key in existing - found if _root_of(key) is not None}
    vanished = {key for key in ours if _root_of(key) in listed or _root_of(key) not in configured}
    added = found - existing
    cursor = hashlib.sha256("\n".join(sorted(found)).encode()).hexdigest()[:16]
    if not added and not vanished:
        return dg.SkipReason(f"{len(found)} checkpoints under {len(listed)} root(s); none new or vanished")
    requests = []
    if added:
        requests.append(checkpoint_partitions.build_add_request(sorted(added)))
    if vanished:
        requests.append(checkpoint_partitions.build_delete_request(sorted(vanished)))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=f"discovered:{key}") for key in sorted(added)],
        dynamic_partitions_requests=requests,
        cursor=cursor,
    )
