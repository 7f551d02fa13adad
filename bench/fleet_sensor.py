"""Benchmark: the commit sensor over a fleet of live checkpoints, with Dagster's run queue.

`--checkpoints` synthetic checkpoints (testbed/synthetic.py naming) each commit every
`--commit-every` seconds for `--minutes` of wall time. Most take Spark's own snapshots every 5
versions and never cross the chain threshold; `--crossing` of them take none and cross it every 10
commits. The real `checkpoint_commit_sensor` ticks every `--tick` seconds against a real Dagster
instance: the runs it requests are added to the instance's run storage, and a stand-in for the
daemon's queued-run coordinator starts at most `--max-concurrent` at a time (oldest first) and
finishes each after `--run-seconds`. A finished compaction writes a snapshot at the version it
found, as the real one would; a finished validation changes nothing.

Reported: runs requested per tick, against those the sensor before this one would have requested
(one per checkpoint with a new commit, every tick); the largest queue depth per job (never above
the sensor's cap); the worst delay from a crossing (the commit that made a chain reach the
threshold) to the start of its batched compaction run, in ticks (target: at most 2 beyond the
gathering window, `--gather`); the compaction runs against the checkpoints they compacted; and the longest gap
between two validations of one checkpoint, as the sensor requested them (target: within the
period plus a tick) and as the runs started (the queue's wait added).

    python -m bench.fleet_sensor [--checkpoints 200] [--crossing 10] [--commit-every 10] [--minutes 10]
                                 [--tick 30] [--period 180] [--gather 60] [--max-concurrent 4]
                                 [--run-seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

from testbed import synthetic

THRESHOLD = 10


class Fleet:
    """Checkpoints that commit on a schedule, written a version at a time."""

    def __init__(self, root: Path, count: int, crossing: int) -> None:
        self.root, self.names = root, [f"q{i:03d}" for i in range(count)]
        self.crossing = set(self.names[:: max(1, count // max(1, crossing))][:crossing])
        self.version = dict.fromkeys(self.names, 0)
        self.zip_at = dict.fromkeys(self.names, 0)  # the newest snapshot's version
        self.crossed_at: dict[str, float] = {}  # crossing not yet served: since when
        for name in self.names:
            self._write(name, 2)

    def _files(self, name: str, versions: int) -> dict[str, bytes]:
        every = 1_000_000 if name in self.crossing else 5
        return synthetic.files(1, versions, window=3, snapshot_every=every)

    def _write(self, name: str, versions: int) -> None:
        old = self._files(name, self.version[name]) if self.version[name] else {}
        new = self._files(name, versions)
        changed = {k: v for k, v in new.items() if old.get(k) != v}
        synthetic.write_local(self.root / name, changed, time.time())
        for rel in old.keys() - new.keys():  # log entries out of the window: Spark deletes them too
            (self.root / name / rel).unlink(missing_ok=True)
        self.version[name] = versions

    def chain(self, name: str) -> int:
        """Changelogs recovery replays at the latest committed version (crossing checkpoints only)."""
        return self.version[name] - 1 - self.zip_at[name]

    def commit(self, name: str, now: float) -> None:
        self._write(name, self.version[name] + 1)
        if name in self.crossing and self.chain(name) >= THRESHOLD and name not in self.crossed_at:
            self.crossed_at[name] = now

    def compact(self, name: str) -> None:
        """What a finished compaction leaves: a snapshot of the newest committed version (the id its
        lineage names) and the SST it lists."""
        version = self.version[name] - 1
        d = self.root / name / "state/0/0"
        sst = f"{version:06d}-{uuid.uuid4()}.sst"
        (d / "SSTs").mkdir(exist_ok=True)
        (d / "SSTs" / sst).write_bytes(b"x")
        (d / f"{version}_{synthetic.uid(0, version)}.zip").write_bytes(synthetic._zip([(sst, 1)]))
        self.zip_at[name] = version
        if self.chain(name) < THRESHOLD:
            self.crossed_at.pop(name, None)  # a crossing seen while it ran is served by it


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", type=int, default=200)
    p.add_argument("--crossing", type=int, default=10)
    p.add_argument("--commit-every", type=float, default=10.0)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--tick", type=float, default=30.0)
    p.add_argument("--period", type=float, default=180.0, help="validation period, seconds")
    p.add_argument("--gather", type=float, default=60.0, help="compaction gathering window, seconds")
    p.add_argument("--max-concurrent", type=int, default=4)
    p.add_argument("--run-seconds", type=float, default=20.0)
    p.add_argument("--dir", type=Path)
    args = p.parse_args()
    os.environ["CKPT_VALIDATION_PERIOD"] = f"{args.period:g}s"  # read when the sensor module loads
    os.environ["CKPT_COMPACTION_GATHER"] = f"{args.gather:g}s"

    import dagster as dg
    from dagster import DagsterRunStatus
    from dagster._core.storage.dagster_run import DagsterRun

    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors

    work = args.dir or Path(tempfile.mkdtemp(prefix="fleet-sensor-"))
    fleet = Fleet(work, args.checkpoints, args.crossing)
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(work))])
    keys = {f"f:{n}": n for n in fleet.names}
    caps = sensors.SENSOR_CAPS
    ticks, latencies, validated, depth = [], [], defaultdict(list), defaultdict(int)
    requested = defaultdict(list)  # when the sensor asked for a run that validates each checkpoint
    compacted = 0
    started_at: dict[str, float] = {}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", list(keys))
        cursor, start, seen_versions, old_sensor_runs = None, time.time(), {}, 0
        spread = args.commit_every / len(fleet.names)
        next_commit = {n: start + spread * i for i, n in enumerate(fleet.names)}
        next_tick, end = start, start + args.minutes * 60
        while time.time() < end:
            now = time.time()
            for name, due in next_commit.items():
                if due <= now:
                    fleet.commit(name, now)
                    next_commit[name] = due + args.commit_every
            _coordinate(instance, args, fleet, keys, started_at, now, latencies, validated, DagsterRunStatus)
            if now >= next_tick:
                # The sensor before this one: a run per checkpoint with a new commit, every tick.
                old_sensor_runs += sum(seen_versions.get(n) != v for n, v in fleet.version.items())
                seen_versions = dict(fleet.version)
                ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
                t0 = time.perf_counter()
                result = sensors.checkpoint_commit_sensor(ctx)
                seconds = time.perf_counter() - t0
                requests = result.run_requests if isinstance(result, dg.SensorResult) else []
                cursor = result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor
                for r in requests:
                    for key in _validated_by(r):
                        requested[key].append(now)
                    tags = {
                        **(r.tags or {}),
                        "run_key": r.run_key,
                        "ckpt/partitions": json.dumps(_validated_by(r)),
                    }
                    instance.add_run(DagsterRun(job_name=r.job_name, run_id=str(uuid.uuid4()),
                                                status=DagsterRunStatus.NOT_STARTED, tags=tags))  # fmt: skip
                for kind in ("compaction", "validation"):
                    waiting = instance.get_runs_count(dg.RunsFilter(tags={"ckpt/kind": kind}, statuses=[
                        DagsterRunStatus.NOT_STARTED]))  # fmt: skip
                    depth[kind] = max(depth[kind], waiting)
                kinds = [r.tags["ckpt/kind"] for r in requests]
                compacted += sum(
                    len(_validated_by(r)) for r in requests if r.tags["ckpt/kind"] == "compaction"
                )
                ticks.append({"at": round(now - start, 1), "seconds": round(seconds, 3),
                              "compact": kinds.count("compaction"),
                              "validate": kinds.count("validation"),
                              "skip": "" if requests else str(result.skip_message)[:120]})  # fmt: skip
                print(json.dumps(ticks[-1]), flush=True)
                next_tick += args.tick
            time.sleep(0.2)
    worst_ticks = max((lat / args.tick for lat in latencies), default=0.0)

    def longest_gap(times: dict[str, list[float]]) -> float:
        return max((b - a for t in times.values() for a, b in zip(t, t[1:], strict=False)), default=0.0)

    never = [k for k in keys if not validated.get(k)]
    summary = {
        "checkpoints": args.checkpoints, "crossing": len(fleet.crossing), "minutes": args.minutes,
        "ticks": len(ticks), "tick_seconds_max": max(t["seconds"] for t in ticks),
        "runs_requested_per_tick_max": max(t["compact"] + t["validate"] for t in ticks),
        "runs_requested": sum(t["compact"] + t["validate"] for t in ticks),
        "runs_the_old_sensor_requested": old_sensor_runs,
        "compactions": len(latencies), "compaction_runs": sum(t["compact"] for t in ticks),
        "checkpoints_in_compaction_runs": compacted, "queue_cap": caps.max_queued_per_job,
        "queue_depth_max": dict(depth), "crossing_to_start_worst_ticks": round(worst_ticks, 2),
        "validation_request_gap_max_seconds": round(longest_gap(requested), 1),
        "validation_start_gap_max_seconds": round(longest_gap(validated), 1), "period_seconds": args.period,
        "gather_seconds": args.gather,
        "never_validated": len(never), "crossings_unserved": len(fleet.crossed_at),
    }  # fmt: skip
    print(json.dumps(summary, indent=2))


def _validated_by(request) -> list[str]:
    """The checkpoints a requested run validates: a batched compaction's (it validates first) or a
    validation run's."""
    ops = request.run_config["ops"]
    return list(
        next(ops[op]["config"]["partitions"] for op in ("maintain_each", "validate_each") if op in ops)
    )


def _coordinate(instance, args, fleet, keys, started_at, now, latencies, validated, status) -> None:
    """The daemon's part, stood in for: finish runs whose time is up, start the oldest waiting ones."""
    import dagster as dg

    running = instance.get_runs(dg.RunsFilter(statuses=[status.STARTED]))
    done = [r for r in running if now - started_at[r.run_id] >= args.run_seconds]
    for run in done:
        if run.tags["ckpt/kind"] == "compaction":
            for key in json.loads(run.tags["ckpt/partitions"]):
                fleet.compact(keys[key])
        _replace(instance, run, status.SUCCESS)
    free = args.max_concurrent - (len(running) - len(done))
    waiting = list(reversed(instance.get_runs(dg.RunsFilter(statuses=[status.NOT_STARTED]))))  # oldest first
    for run in waiting[: max(0, free)]:
        started_at[run.run_id] = now
        for key in json.loads(run.tags["ckpt/partitions"]):
            validated[key].append(now)  # a compaction run validates first
            crossed = fleet.crossed_at.pop(keys[key], None) if run.tags["ckpt/kind"] == "compaction" else None
            if crossed is not None:
                latencies.append(now - crossed)
        _replace(instance, run, status.STARTED)


def _replace(instance, run, new_status) -> None:
    instance.delete_run(run.run_id)
    instance.add_run(run.with_status(new_status))


if __name__ == "__main__":
    main()
