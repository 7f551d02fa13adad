"""Benchmark: fleet operations on a real deployment, measured from Dagster's own records.

docs/dagster.md's recipe on loopback: Postgres, the gRPC code server, `dagster-daemon` and
`dagster-webserver`, each its own process. The root holds `--checkpoints` checkpoints in 40 teams:
`--due` of them copies of the corpus' `long_chain` (a real checkpoint with a replay chain of 32,
dated past the quiet period), the others synthetic (`testbed.synthetic`, the real naming) and idle.

Two phases, each on a fresh copy, a fresh database and a fresh deployment:
- `one run per checkpoint`: the commit sensor asks for compaction runs of one checkpoint each
  (`CKPT_COMPACTION_RUN_MAX_CHECKPOINTS=1`), as releases before batching did;
- `batched`: the shipped settings (runs of 10).
Each measures, from the sensors' tick records and the runs' and materializations' timestamps:
the time from the commit sensor's first tick over the discovered fleet until every due checkpoint
has a compaction materialization, and the compaction runs it took; and, launched through GraphQL
when the first compaction run has started, how long a validation run of 10 checkpoints waits in
the queue (its start time less its creation time). The batched phase then times the schedules'
evaluation ("Test schedule", GraphQL's dry run) at the fleet's size and, once the instance holds
10,000 partitions, at 10,000.

Targets (issue 60): a schedule tick at 10,000 evaluates in under 30 s and asks for at most 100
runs; the due compactions take at most `due / 10` runs and under a quarter of the one-run-per-
checkpoint phase's time; the validation run starts within 60 s.

    python -m bench.fleet_deployment [--checkpoints 2000] [--due 40] [--out bench/fleet_deployment.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from testbed import synthetic
from testbed.copying import copy_checkpoint
from testbed.corpus import checkpoints as corpus_checkpoints
from testbed.corpus import ensure_corpus
from testbed.demo import date_back
from testbed.deployment import deployment
from testbed.postgres import postgres_server

LOCATION, REPOSITORY, ROOT = "ckpt-maint", "__repository__", "bench"
TICKS = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor {
  sensorState { ticks(limit: 200) { timestamp endTimestamp status requestedJobRunCount } } } } }"""
RUNS = """query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) { ... on Runs {
  results { runId status creationTime startTime endTime } } } }"""
MATERIALIZED = """query($p: [String!]) { assetNodeOrError(assetKey: {path: ["checkpoint_compaction"]}) {
  ... on AssetNode { assetMaterializations(partitions: $p) { partition timestamp } } } }"""
DRY_RUN = """mutation($s: ScheduleSelector!, $t: Float) { scheduleDryRun(selectorData: $s, timestamp: $t) {
  __typename ... on DryRunInstigationTick { evaluationResult { runRequests { runKey } skipReason
  error { message } } } ... on PythonError { message } } }"""


def build_root(root: Path, checkpoints: int, due: int) -> list[str]:
    """The fleet; returns the partition keys of the due checkpoints."""
    chain = corpus_checkpoints(ensure_corpus())["long_chain"]
    due_names = set(range(0, checkpoints, max(1, checkpoints // due))[:due])  # spread over the fleet
    keys = []
    for i in range(checkpoints):
        rel = f"team-{i % 40:02d}/query-{i:05d}"
        if i in due_names:
            copy_checkpoint(chain, root / rel)
            keys.append(f"{ROOT}:{rel}")
        else:
            synthetic.write_local(root / rel, synthetic.iter_files(1, 3, window=3, snapshot_every=5))
    date_back(root, 2 * 3600)  # past the quiet period: compaction takes the newest version
    return sorted(keys)


def phase(work: Path, name: str, args, settings: dict[str, str], schedules: bool) -> dict:
    root = work / name / "root"
    due = build_root(root, args.checkpoints, args.due)
    env = {
        "CKPT_ROOTS": json.dumps([{"name": ROOT, "url": str(root)}]),
        "CKPT_COMMIT_SENSOR_INTERVAL": "30",
        "CKPT_SPARK_MASTER": "local[2]",
        **settings,
    }
    with postgres_server() as url, deployment(work / name / "dagster_home", env, url) as dev:
        sensor = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}
        discovery = {**sensor, "sensorName": "checkpoint_discovery_sensor"}
        found = dev.wait_for("discovery", lambda: _ticks(dev, discovery), 600, every=5)
        discovered_at = min(t["endTimestamp"] or t["timestamp"] for t in found)
        compaction = [{"key": "ckpt/kind", "value": "compaction"}]

        def first_started():
            runs = dev.graphql(RUNS, tags=compaction)["runsOrError"]["results"]
            return [r for r in runs if r["startTime"]]

        dev.wait_for("a compaction run to start", first_started, 1800, every=2)
        validation = _launch_validation(dev, due[:10])
        done = dev.wait_for(f"{len(due)} compactions", lambda: _all_compacted(dev, due), 7200, every=10)
        commit = _ticks(dev, {**sensor, "sensorName": "checkpoint_commit_sensor"})
        ticks = sorted(t["timestamp"] for t in commit if t["timestamp"] >= discovered_at)
        runs = dev.graphql(RUNS, tags=compaction)["runsOrError"]["results"]
        waited = dev.wait_for("the validation run", lambda: _started(dev, validation), 600, every=2)
        result = {
            "compaction_runs": len(runs),
            "seconds_first_tick_to_all_compacted": round(max(done.values()) - ticks[0], 1),
            "validation_wait_seconds": round(waited, 1),
        }
        print(json.dumps({name: result}), flush=True)
        if schedules:
            result["schedules"] = {str(args.checkpoints): _dry_runs(dev)}
            _add_partitions(work / name / "dagster_home", url, 10_000 - args.checkpoints)
            result["schedules"]["10000"] = _dry_runs(dev)
    return result


def _ticks(dev, selector: dict) -> list[dict]:
    state = dev.graphql(TICKS, s=selector)["sensorOrError"]["sensorState"]
    return [t for t in state["ticks"] if t["status"] in ("SUCCESS", "SKIPPED")]


def _all_compacted(dev, keys: list[str]) -> dict[str, float] | None:
    mats = dev.graphql(MATERIALIZED, p=keys)["assetNodeOrError"]["assetMaterializations"]
    latest: dict[str, float] = {}
    for m in mats:
        latest[m["partition"]] = max(latest.get(m["partition"], 0.0), float(m["timestamp"]) / 1000)
    return latest if set(latest) == set(keys) else None


def _launch_validation(dev, keys: list[str]) -> str:
    params = {
        "selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY,
                     "jobName": "validate_checkpoints"},
        "runConfigData": {"ops": {"validate_each": {"config": {"partitions": keys}}}},
    }  # fmt: skip
    out = dev.graphql(
        """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
      __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
        p=params,
    )
    assert out["launchRun"]["__typename"] == "LaunchRunSuccess", out
    return out["launchRun"]["run"]["runId"]


def _started(dev, run_id: str) -> float | None:
    q = "query($id: ID!) { runOrError(runId: $id) { ... on Run { creationTime startTime } } }"
    run = dev.graphql(q, id=run_id)["runOrError"]
    return None if not run["startTime"] else max(run["startTime"] - run["creationTime"], 1e-3)


def _dry_runs(dev) -> dict[str, dict]:
    """Each schedule's evaluation, as the UI's "Test schedule" asks for it: seconds and runs."""
    out = {}
    for schedule in (f"maintenance_{ROOT}", "checkpoint_audit_schedule"):
        selector = {
            "repositoryLocationName": LOCATION,
            "repositoryName": REPOSITORY,
            "scheduleName": schedule,
        }
        began = time.perf_counter()
        answer = dev.graphql(DRY_RUN, s=selector, t=time.time())["scheduleDryRun"]
        seconds = time.perf_counter() - began
        evaluation = answer.get("evaluationResult") or {}
        assert not evaluation.get("error"), answer
        out[schedule] = {"seconds": round(seconds, 2), "runs": len(evaluation.get("runRequests") or [])}
    return out


def _add_partitions(home: Path, url: str, count: int) -> None:
    """Partitions of checkpoints that are not there: a schedule's evaluation reads only the names."""
    import os

    import dagster as dg

    os.environ["DAGSTER_PG_URL"] = url
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("checkpoints", [f"{ROOT}:extra/q{i:05d}" for i in range(count)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", type=int, default=2000)
    p.add_argument("--due", type=int, default=40)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fleet-deployment-"))
    one = phase(work, "one_per_run", args, {"CKPT_COMPACTION_RUN_MAX_CHECKPOINTS": "1"}, schedules=False)
    batched = phase(work, "batched", args, {}, schedules=True)
    summary = {
        "checkpoints": args.checkpoints, "due": args.due,
        "one run per checkpoint": one, "batched": batched,
        "time_ratio_batched_to_one_per_run": round(
            batched["seconds_first_tick_to_all_compacted"] / one["seconds_first_tick_to_all_compacted"], 3
        ),
    }  # fmt: skip
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
