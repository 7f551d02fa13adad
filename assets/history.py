"""What this Dagster instance recorded about each checkpoint's maintenance, read in bulk for the
fleet report: the newest materialization of the cleanup plan, compaction, cleanup and
expired-state assets, the newest rehearsal, and the failed runs of the maintenance jobs. The names
it reads by are the ones their writers define (the assets' metadata keys, the jobs' names)."""

from typing import Any

import dagster as dg

from assets.checkpoints import INVENTORY_ASSET, LAST_REHEARSAL, REHEARSAL_BATCH, REHEARSAL_SPARK
from assets.cleanup import (
    APPLIED,
    DELETED_BYTES,
    DELETED_FILES,
    PLANNED_BYTES,
    checkpoint_orphan_cleanup,
    checkpoint_orphan_plan,
)
from assets.compaction import STORES_COMPACTED, checkpoint_compaction
from assets.expiry import ASSET as _EXPIRED
from assets.expiry import EXPIRED, EXPIRED_BYTES, EXPIRED_SHARE
from assets.names import CLEANUP_JOB, COMPACTION_JOB, MAINTENANCE_JOB
from assets.ranges import value_for
from checkpoint.analysis import utc_minute

_PLAN, _COMPACTION, _CLEANUP = (
    a.key.to_user_string() for a in (checkpoint_orphan_plan, checkpoint_compaction, checkpoint_orphan_cleanup)
)
# The jobs that run each: a failed run newer than the asset's materialization is what is shown.
_COMPACTION_JOBS: tuple[str, ...] = (COMPACTION_JOB, MAINTENANCE_JOB)
_CLEANUP_JOBS: tuple[str, ...] = (CLEANUP_JOB, MAINTENANCE_JOB)


class MaintenanceHistory:
    """What this Dagster instance recorded about every checkpoint's maintenance, read in bulk: for
    each asset the newest materialization of every partition (one query for their ids, then the
    records a thousand at a time), the newest restart rehearsal of each (the same, for the
    inventory's observations), and the failed maintenance runs of each job (one query each).
    Asked per checkpoint, that was five queries a checkpoint: 50,000 at 10,000 checkpoints."""

    _CHUNK = 1000
    _FAILED_RUNS = 5000  # per job, newest first: a failure older than its job's 5,000 newest is not shown

    def __init__(self, instance: dg.DagsterInstance, keys: list[str]):
        self.instance = instance
        wanted = set(keys)
        assets = (_PLAN, _COMPACTION, _CLEANUP, _EXPIRED)
        self.latest = {asset: self._latest(asset, wanted) for asset in assets}
        self.rehearsals = self._latest(INVENTORY_ASSET, wanted, observed=True)
        self.failed = {jobs: self._failed(jobs, wanted) for jobs in (_COMPACTION_JOBS, _CLEANUP_JOBS)}

    def _latest(self, asset: str, keys: set[str], observed: bool = False) -> dict[str, Any]:
        key = dg.AssetKey(asset)
        event = (
            dg.DagsterEventType.ASSET_OBSERVATION if observed else dg.DagsterEventType.ASSET_MATERIALIZATION
        )
        fetch = self.instance.fetch_observations if observed else self.instance.fetch_materializations
        ids = self.instance.get_latest_storage_id_by_partition(key, event, keys)
        by_id = {storage_id: partition for partition, storage_id in ids.items()}
        found: dict[str, Any] = {}
        wanted = sorted(by_id)
        for i in range(0, len(wanted), self._CHUNK):
            chunk = wanted[i : i + self._CHUNK]
            got = fetch(dg.AssetRecordsFilter(asset_key=key, storage_ids=chunk), limit=len(chunk)).records
            found.update((by_id[r.storage_id], r) for r in got)
        return found

    def _failed(self, jobs: tuple[str, ...], keys: set[str]) -> dict[str, float]:
        newest: dict[str, float] = {}
        for job in jobs:
            runs = self.instance.get_run_records(
                dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.FAILURE]), limit=self._FAILED_RUNS
            )
            for r in runs:
                key = r.dagster_run.tags.get("dagster/partition")
                if key in keys and r.end_time is not None and r.end_time > newest.get(key, 0.0):
                    newest[key] = r.end_time
        return newest

    def known(self, key: str) -> dict:
        plan = self.latest[_PLAN].get(key)
        compaction = self.latest[_COMPACTION].get(key)
        cleanup = self.latest[_CLEANUP].get(key)
        reclaimable = _int(plan, key, PLANNED_BYTES)
        if (
            reclaimable is not None
            and plan is not None
            and cleanup is not None
            and cleanup.timestamp >= plan.timestamp
        ):
            # the plan's bytes, less what a cleanup applied after it deleted: what is left to reclaim
            deleted = _int_of(cleanup.asset_materialization.metadata, key, DELETED_BYTES)
            reclaimable = max(0, reclaimable - deleted)
        rehearsal = self.rehearsals.get(key)
        expired = self.latest[_EXPIRED].get(key)
        return {
            "expired": _int(expired, key, EXPIRED),
            "expired_share": _share(expired, key),
            "expired_bytes": _int(expired, key, EXPIRED_BYTES),
            "last_rehearsal": None if rehearsal is None else _rehearsal(rehearsal),
            "reclaimable_bytes": reclaimable,
            "reclaimable_planned_at": plan.timestamp if plan is not None else None,
            "last_compaction": self._describe(
                compaction, _COMPACTION_JOBS, key,
                lambda m: f"{_int_of(m, key, STORES_COMPACTED)} stores compacted",
            ),
            "last_cleanup": self._describe(
                cleanup, _CLEANUP_JOBS, key,
                lambda m: (f"deleted {_int_of(m, key, DELETED_FILES)} files" if value_for(m, key, APPLIED)
                           else "dry run"),
            ),
        }  # fmt: skip

    def _describe(self, record, jobs: tuple[str, ...], key: str, what) -> str | None:
        failed = self.failed[jobs].get(key)
        if failed is not None and failed > (record.timestamp if record else 0.0):
            return f"{utc_minute(failed)}: FAILED"
        if record is None:
            return None
        return f"{utc_minute(record.timestamp)}: {what(record.asset_materialization.metadata)}"


def _rehearsal(record) -> str:
    meta = {k: v.value for k, v in record.asset_observation.metadata.items()}
    return (f"{utc_minute(record.timestamp)}: {meta.get(LAST_REHEARSAL)} (Spark {meta.get(REHEARSAL_SPARK)}, "
            f"batch {meta.get(REHEARSAL_BATCH)})")  # fmt: skip


def _int_of(metadata: dict, key: str, name: str) -> int:
    value = value_for(metadata, key, name)
    return int(value) if isinstance(value, int | float) else 0


def _share(record, key: str) -> float | None:
    value = None if record is None else value_for(record.asset_materialization.metadata, key, EXPIRED_SHARE)
    return float(value) if isinstance(value, int | float) else None


def _int(record, key: str, name: str) -> int | None:
    """A checkpoint's own figure (`value_for`: a range's materialization holds each one's)."""
    if record is None:
        return None
    value = value_for(record.asset_materialization.metadata, key, name)
    return int(value) if isinstance(value, int | float) else None
