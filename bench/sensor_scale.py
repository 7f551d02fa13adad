"""Benchmark: discovery and the commit sensor over a fleet of thousands of checkpoints.

`--checkpoints` synthetic format V2 checkpoints (testbed/synthetic.py naming, one store, a snapshot
every 5 versions) under one local root, the project's own sensors evaluated as the daemon evaluates
them, against a real Dagster instance. Reported, each with the command's figures:

- discovery's first tick: its time, the runs it requests (batched audits), the partitions it adds;
- the commit sensor's first tick (every checkpoint new: a head-first read and a compaction plan
  each), then idle ticks (nothing committed), then a busy tick after a tenth of the fleet
  committed: each tick's time against its budget, how many checkpoints it looked at, how many ticks
  a full round takes;
- the cursor's size;
- an idle tick against a bare listing of every `commits/` folder (`os.listdir`, the faster of one
  at a time and 32 at once), in this process: the ratio (target at most 3);
- `ckpt fleet` and the fleet asset against the same bare listing (target at most 20), and this
  process's peak RSS after the asset;
- with `--dormant F`, last: an idle round once a share F of the fleet is dormant (its commits dated
  past the dormancy period), against an idle round of the same fleet all alive just before, in
  this process (target at most 0.4 at F = 0.7).

    python -m bench.sensor_scale [--checkpoints 1000] [--budget 30] [--root DIR] [--dormant 0.7]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed import synthetic


def _write(root: Path, count: int, versions: int) -> None:
    started = time.monotonic()
    for i in range(count):
        folder = root / f"team-{i % 40:02d}" / f"query-{i:05d}"
        if not (folder / "metadata").exists():
            # Stopped two hours ago: past the quiet period, far from dormant (`--dormant` makes some so).
            files = synthetic.iter_files(1, versions, window=3, snapshot_every=5)
            synthetic.write_local(folder, files, time.time() - 7200)
    print(f"fleet: {count} checkpoints under {root} ({time.monotonic() - started:.0f} s to write)")


def _bare_listing(root: Path, keys: list[str], workers: int) -> float:
    """The kernel's listing of every `commits/` folder, `workers` at once: the floor of an idle
    tick, with nothing of this project in it."""
    folders = [root / key.split(":", 1)[1] / "commits" for key in keys]
    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(os.listdir, folders))
    return time.monotonic() - started


def first_round_then_idle(tick, count: int, idle_ticks: int) -> tuple[str | None, list[float]]:
    """Ticks until every one of `count` checkpoints was looked at once, then `idle_ticks` more:
    the cursor after them, and the idle ticks' times."""
    from orchestration.due import SensorState

    cursor = tick(None, "first tick")
    rounds = 1
    while len(SensorState.from_json(cursor).seen) < count and rounds < 50:
        cursor = tick(cursor, f"first round, tick {rounds + 1}")
        rounds += 1
    print(f"a first look at every checkpoint took {rounds} tick(s)")
    idle = []
    for n in range(idle_ticks):
        began = time.monotonic()
        cursor = tick(cursor, f"idle tick {n + 1}")
        idle.append(time.monotonic() - began)
    return cursor, idle


def _fleet_command(root: Path) -> float:
    """`ckpt fleet` over the root, in this process, its document thrown away."""
    import contextlib
    import io

    from cli.main import main as ckpt

    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        ckpt(["fleet", str(root), "--no-cleanup-plan", "--json"])
    return time.monotonic() - started


def _fleet_asset(instance, roots) -> float:
    """The fleet asset materialized by Dagster over every partition discovery added."""
    import dagster as dg

    from assets.fleet import checkpoint_fleet_report

    started = time.monotonic()
    assert dg.materialize([checkpoint_fleet_report], instance=instance, resources={"roots": roots}).success
    return time.monotonic() - started


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=1000)
    parser.add_argument("--budget", type=float, default=30.0, help="the commit sensor's tick budget (s)")
    parser.add_argument("--root", type=Path, help="where the fleet is written (kept for a re-run)")
    parser.add_argument("--idle-ticks", type=int, default=3)
    parser.add_argument("--dormant", type=float, default=0.0, help="the share of the fleet made dormant last")
    args = parser.parse_args()
    os.environ["CKPT_COMMIT_SENSOR_BUDGET"] = str(args.budget)

    import dagster as dg

    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration import sensors
    from orchestration.due import SensorState

    root = args.root or Path(tempfile.mkdtemp(prefix="ckpt-sensor-scale-"))
    _write(root, args.checkpoints, 9)
    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="f", url=str(root))])
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources={"roots": roots})
        started = time.monotonic()
        found = sensors.checkpoint_discovery_sensor(context)
        took = time.monotonic() - started
        added = instance.get_dynamic_partitions("checkpoints")  # the tick added them
        audits = len(found.run_requests)
        print(f"discovery, first tick: {took:.1f} s, {len(added)} partitions added, {audits} audit run(s) "
              f"requested (the release before: {len(added)} runs, one each)")  # fmt: skip
        keys = sorted(added)

        def tick(cursor: str | None, label: str) -> str | None:
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
            began = time.monotonic()
            result = sensors.checkpoint_commit_sensor(ctx)
            spent = time.monotonic() - began
            after = result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor
            state = SensorState.from_json(after)
            runs = len(result.run_requests) if isinstance(result, dg.SensorResult) else 0
            print(f"commit sensor, {label}: {spent:.1f} s (budget {args.budget:g} s), next round from "
                  f"{state.next_key or keys[0]}, {runs} run(s), cursor {len(after or '')} bytes")  # fmt: skip
            return after

        cursor, idle = first_round_then_idle(tick, len(keys), args.idle_ticks)
        # The floor: the faster of one listing after another (as the sensor looks on a local disk)
        # and 32 at once, each the best of a few, the kernel's dentries warm from the ticks.
        bare = min(_bare_listing(root, keys, w) for w in (1, sensors.COMMIT_SENSOR_WORKERS) for _ in range(3))
        print(f"idle tick {min(idle):.2f} s against a bare listing of every commits/ folder {bare:.2f} s: "
              f"{min(idle) / bare:.2f}x (target <= 3)")  # fmt: skip
        fleet_cli = _fleet_command(root)
        print(f"ckpt fleet --no-cleanup-plan: {fleet_cli:.1f} s, {fleet_cli / bare:.1f}x the bare listing "
              "(target <= 20)")  # fmt: skip
        report = _fleet_asset(instance, roots)
        print(f"fleet asset: {report:.1f} s, {report / bare:.1f}x the bare listing, peak RSS of this process "
              f"{_peak_rss_mb():.0f} MB")  # fmt: skip
        busy = keys[:: max(1, len(keys) // max(1, len(keys) // 10))]
        for key in busy:
            newer = synthetic.iter_files(1, 10, window=3, snapshot_every=5)
            synthetic.write_local(root / key.split(":", 1)[1], newer, time.time())
        tick(cursor, f"busy tick ({len(busy)} new commits)")
        if args.dormant:
            _dormant_round(tick, root, keys, args.dormant, args.idle_ticks)


def _dormant_round(tick, root: Path, keys: list[str], share: float, ticks: int) -> None:
    """Idle rounds all alive, then with `share` of the checkpoints dormant (spread over the fleet):
    each round one tick (the budget covers the fleet), the best of `ticks`. A cursor of its own, so
    that no checkpoint is taken for dormant before. Measured: the round's looks (one listing of
    `commits/` each: what grows with the fleet, and what a round costs in requests on S3) and the
    whole tick, which adds Dagster's own per-tick work (resources, the instance's queries)."""
    from checkpoint.policy import POLICY
    from orchestration import sensors

    spent = {"looks": 0, "seconds": 0.0}
    plain = sensors.look_within

    def timed(order, *args, **kwargs):
        began = time.monotonic()
        done = plain(order, *args, **kwargs)
        spent["seconds"] += time.monotonic() - began
        spent["looks"] += len(done)
        return done

    sensors.look_within = timed
    _dated(root, keys, time.time() - 7200)
    cursor = tick(tick(None, "all alive: first sight"), "all alive: the first idle look")

    def best(label: str) -> tuple[float, float, int]:
        nonlocal cursor
        rounds = []
        for n in range(ticks):
            spent.update(looks=0, seconds=0.0)
            began = time.monotonic()
            cursor = tick(cursor, f"{label}, idle tick {n + 1}")
            rounds.append((time.monotonic() - began, spent["seconds"], spent["looks"]))
        return min(rounds)

    alive = best("all alive")
    dormant = [k for i, k in enumerate(keys) if (i * 7919) % 1000 < share * 1000]
    _dated(root, dormant, time.time() - POLICY.dormant_seconds - 86400)
    cursor = tick(cursor, f"{len(dormant)} of {len(keys)} dormant: the look that finds them")
    rare = best(f"{len(dormant)} dormant")
    print(f"idle round with {len(dormant) / len(keys):.0%} of the fleet dormant against all alive, in "
          f"this run: looks {rare[2]} / {alive[2]} ({rare[2] / alive[2]:.2f}), their time {rare[1]:.3f} s / "
          f"{alive[1]:.3f} s ({rare[1] / alive[1]:.2f}; target <= 0.4), the whole tick {rare[0]:.2f} s / "
          f"{alive[0]:.2f} s ({rare[0] / alive[0]:.2f})")  # fmt: skip


def _dated(root: Path, keys: list[str], when: float) -> None:
    """The logs of `keys`' checkpoints written at `when`: what dormancy is told by."""
    for key in keys:
        for log in ("commits", "offsets"):
            for f in (root / key.split(":", 1)[1] / log).iterdir():
                os.utime(f, (when, when))


if __name__ == "__main__":
    main()
