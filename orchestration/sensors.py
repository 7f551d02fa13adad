"""Discovery: keeps one partition per checkpoint found under the configured roots."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

import dagster as dg

from assets.compaction import compaction_job
from checkpoint.compaction import CompactionRefused, plan_compaction
from checkpoint.errors import CheckpointError
from checkpoint.model import Checkpoint
from orchestration.partitions import checkpoint_partitions, parse_partition_key
from orchestration.resources import CheckpointRootsResource
from orchestration.schedules import audit_job

# How often the daemon looks for new commits; tests and busy fleets set it through the environment.
COMMIT_SENSOR_INTERVAL = int(os.environ.get("CKPT_COMMIT_SENSOR_INTERVAL", "60"))
# Checkpoints looked at side by side in one tick: an idle look is one LIST round trip on S3, so
# 1,000 checkpoints take about 1000 / 32 round trips.
COMMIT_SENSOR_WORKERS = int(os.environ.get("CKPT_COMMIT_SENSOR_WORKERS", "32"))


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
    """Whether a store crosses the threshold or nears the lineage cap. A checkpoint with error
    findings is never compacted: its new commit gets an audit run, which shows them."""
    try:
        targets, _ = plan_compaction(ckpt, min_chain=roots.long_chain_threshold, quiet_seconds=0)
    except CompactionRefused:
        return False
    return bool(targets)


def _look(roots: CheckpointRootsResource, key: str, seen: int | None) -> tuple[int | None, bool, str | None]:
    """(latest committed batch, whether to compact, why it was skipped) for one checkpoint.

    Idle, it costs one shallow listing of `commits/`; a new commit adds the head-first reads of
    the two newest batches (a live query is compacted at the one below the newest).
    """
    try:
        latest = roots.latest_commit(key)
        if latest is None or latest == seen:
            return latest, False, None
        return latest, needs_compaction(roots, roots.load(key, recent=2)), None
    except (CheckpointError, ValueError) as exc:
        return None, False, str(exc)


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
    keys = context.instance.get_dynamic_partitions(checkpoint_partitions.name)
    before: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
    partitions = set(keys)
    seen = {k: v for k, v in before.items() if k in partitions}  # vanished partitions drop out
    with ThreadPoolExecutor(max(1, min(COMMIT_SENSOR_WORKERS, len(keys) or 1))) as pool:
        looks = list(pool.map(lambda k: _look(roots, k, seen.get(k)), keys))
    requests = []
    for key, (latest, crossing, problem) in zip(keys, looks, strict=True):
        if problem is not None:
            context.log.warning(f"{key}: skipped this tick: {problem}")
        if latest is None or seen.get(key) == latest:
            continue
        seen[key] = latest
        job, what = (compaction_job, "compact") if crossing else (audit_job, "validate")
        requests.append(dg.RunRequest(partition_key=key, job_name=job.name, run_key=f"{what}:{key}:{latest}"))
    cursor = json.dumps(seen, sort_keys=True)
    if not requests:
        if seen != before:
            context.update_cursor(cursor)
        return dg.SkipReason(f"no new commit in {len(keys)} checkpoint(s) since the last tick")
    return dg.SensorResult(run_requests=requests, cursor=cursor)
