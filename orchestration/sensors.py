"""Discovery: keeps one partition per checkpoint found under the configured roots."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import hashlib
import json
import os

import dagster as dg

from assets.compaction import compaction_job
from checkpoint.compaction import plan_compaction
from checkpoint.errors import CheckpointError
from checkpoint.model import Checkpoint
from orchestration.partitions import checkpoint_partitions, parse_partition_key
from orchestration.resources import CheckpointRootsResource
from orchestration.schedules import audit_job

# How often the daemon looks for new commits; tests and busy fleets set it through the environment.
COMMIT_SENSOR_INTERVAL = int(os.environ.get("CKPT_COMMIT_SENSOR_INTERVAL", "60"))


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


def needs_compaction(roots: CheckpointRootsResource, ckpt: Checkpoint) -> bool:
    """Whether a store crosses the threshold or nears the lineage cap."""
    targets, _ = plan_compaction(ckpt, min_chain=roots.long_chain_threshold, quiet_seconds=0)
    return bool(targets)


@dg.sensor(
    jobs=[audit_job, compaction_job],
    minimum_interval_seconds=COMMIT_SENSOR_INTERVAL,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def checkpoint_commit_sensor(context: dg.SensorEvaluationContext, roots: CheckpointRootsResource):
    """On new commits: validation, or compaction (which validates first) when a chain crossed the
    threshold or a lineage header nears the cap.

    The cursor keeps each checkpoint's latest committed batch, and run keys name the commit, so a
    repeated tick requests nothing twice.
    """
    seen: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
    requests = []
    for key in context.instance.get_dynamic_partitions(checkpoint_partitions.name):
        try:
            ckpt = roots.load(key)
            latest = ckpt.latest_committed_batch
            if latest is None or seen.get(key) == latest:
                continue  # planning reads every store's lineage header: only for a new commit
            crossing = needs_compaction(roots, ckpt)
        except (CheckpointError, ValueError) as exc:
            context.log.warning(f"{key}: skipped this tick: {exc}")
            continue
        seen[key] = latest
        job, what = (compaction_job, "compact") if crossing else (audit_job, "validate")
        requests.append(dg.RunRequest(partition_key=key, job_name=job.name, run_key=f"{what}:{key}:{latest}"))
    if not requests:
        return dg.SkipReason("no new commit since the last tick")
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(seen, sort_keys=True))
