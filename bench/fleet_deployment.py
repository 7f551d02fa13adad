"""Benchmark: fleet operations on a real deployment, measured from Dagster's own records.

docs/dagster.md's recipe on loopback: Postgres, the gRPC code server, `dagster-daemon` and
`dagster-webserver`, each its own process. The root holds `--checkpoints` checkpoints in 40 teams:
`--due` of them copies of the corpus' `long_chain` (a real checkpoint with a replay chain of 32,
dated past the quiet period), the others synthetic (`testbed.synthetic`, the real naming) and idle.

Two phases, each on a fresh copy, a fresh database and a fresh deployment:
- `one run per checkpoint`: the commit sensor asks for compaction runs of one checkpoint each
  (`CKPT_COMPACTION_RUN_MAX_CHECKPOINTS=1`), as releases before batching did (`--no-baseline`
  leaves it out: at 10,000 checkpoints and 100 due it is an hour of runs that says nothing new);
- `batched`: the shipped settings (runs of 10).
Each measures, from the sensors' tick records and the runs' and materializations' timestamps:
discovery, from its first tick until every checkpoint is a partition (the instance's partitions,
and the ticks' records of when the tick that added them ended); the commit sensor's ticks, each
one's span against its budget; the time from the commit sensor's first tick over the discovered
fleet until every due checkpoint has a compaction materialization, and the compaction runs it
took; and, launched through GraphQL
when the first compaction run has started, how long a validation run of 10 checkpoints waits in
the queue (its start time less its creation time). The batched phase then times the schedules'
evaluation ("Test schedule", GraphQL's dry run) at the fleet's size and, once the instance holds
10,000 partitions, at 10,000; and loads the UI's asset, partitions and runs pages in headless
Chromium (Playwright, `pip install playwright`, driving Debian's /usr/bin/chromium), each timed
from the navigation until its content shows and the network is quiet, with the console's errors.

Targets (issues 60 and 74): a schedule tick at 10,000 evaluates in under 30 s and asks for at most
100 runs; the due compactions take at most `due / 10` runs (at 10,000 with 100 due: 12 runs and
15 minutes at most) and under a quarter of the one-run-per-checkpoint phase's time; the validation
run starts within 60 s; each page loads in under 3 s with no console error.

    python -m bench.fleet_deployment [--checkpoints 2000] [--due 40] [--no-baseline]
        [--out bench/fleet_deployment.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from testbed import synthetic
from testbed.clock import date_back
from testbed.copying import copy_checkpoint
from testbed.corpus import checkpoints as corpus_checkpoints
from testbed.corpus import ensure_corpus
from testbed.deployment import deployment
from testbed.postgres import postgres_server

LOCATION, REPOSITORY, ROOT = "ckpt-maint", "__repository__", "bench"
# A commit sensor's tick starts no look after its budget (CKPT_COMMIT_SENSOR_BUDGET, 30 s) and
# abandons one after its timeout (10 s): it ends within the two.
COMMIT_BUDGET = 30.0 + 10.0
TICKS = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor {
  sensorState { ticks(limit: 1000) { timestamp endTimestamp status requestedJobRunCount } } } } }"""
RUNS = """query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) { ... on Runs {
  results { runId status creationTime startTime endTime } } } }"""
MATERIALIZED = """query($p: [String!]) { assetNodeOrError(assetKey: {path: ["checkpoint_compaction"]}) {
  ... on AssetNode { assetMaterializations(partitions: $p) { partition timestamp } } } }"""
IN_PROGRESS = """query { runsOrError(filter: {statuses: [STARTING, STARTED, CANCELING]}) { ... on Runs {
  results { runId } } } }"""
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
        home, n = work / name / "dagster_home", args.checkpoints
        every = dev.wait_for(f"{n} partitions", lambda: _discovered(dev, discovery, home, url, n), 1800)
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
        spans = [t["endTimestamp"] - t["timestamp"] for t in commit if t["endTimestamp"]]
        result = {
            "discovery_seconds_to_every_partition": every,
            "commit_sensor_ticks": {
                "ticks": len(spans),
                "longest_seconds": round(max(spans), 1),
                "over_budget_and_a_look": sum(s > COMMIT_BUDGET for s in spans),
                "failed": sum(t["status"] == "FAILURE" for t in commit),
            },
            "compaction_runs": len(runs),
            "seconds_first_tick_to_all_compacted": round(max(done.values()) - ticks[0], 1),
            "validation_wait_seconds": round(waited, 1),
        }
        print(json.dumps({name: result}), flush=True)
        if schedules:
            result["schedules"] = {str(args.checkpoints): _dry_runs(dev)}
            if args.checkpoints < 10_000:
                _add_partitions(work / name / "dagster_home", url, 10_000 - args.checkpoints)
                result["schedules"]["10000"] = _dry_runs(dev)
            result["pages"] = _pages(dev, work / name, due[0])
            print(json.dumps({name: result}), flush=True)
    return result


def _ticks(dev, selector: dict, finished: tuple[str, ...] = ("SUCCESS", "SKIPPED")) -> list[dict]:
    state = dev.graphql(TICKS, s=selector)["sensorOrError"]["sensorState"]
    return [t for t in state["ticks"] if t["status"] in finished]


def _discovered(dev, selector: dict, home: Path, url: str, count: int) -> dict | None:
    """Once the instance holds `count` partitions (the discovery tick adds them itself): seconds
    from discovery's first tick to the end of the last tick that asked for audit runs, and the
    ticks until then, from the ticks' records."""
    with _instance(home, url) as instance:
        if len(instance.get_dynamic_partitions("checkpoints")) < count:
            return None
    ticks = sorted(_ticks(dev, selector, ("SUCCESS", "SKIPPED", "FAILURE")), key=lambda t: t["timestamp"])
    asked = [n for n, t in enumerate(ticks) if t["requestedJobRunCount"] and t["endTimestamp"]]
    if not asked:
        return None  # the partitions are there; the tick's record is not yet
    last = ticks[asked[-1]]
    return {"seconds": round(last["endTimestamp"] - ticks[0]["timestamp"], 1), "ticks": asked[-1] + 1}


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


PAGES = {
    # page: its path, and a text that shows once its data has arrived
    "asset": ("/assets/checkpoint_compaction", "max_chain_after"),  # its latest metadata
    "partitions": ("/assets/checkpoint_compaction?view=partitions", "{key}"),
    "runs": ("/runs", "validate_checkpoints"),
}


def _pages(dev, where: Path, key: str, loads: int = 3) -> dict[str, dict]:
    """Each page in headless Chromium, the median of `loads` loads: seconds from the navigation
    until its data shows (a text that only the data has), and until the network has been quiet for
    500 ms (the UI keeps polling, so quiet, not closed: lazy parts of a page, such as the status
    of 10,000 partitions, come in by then); the console's errors and uncaught exceptions; and the
    slowest GraphQL queries it made, by name. A first visit (the overview, its scripts not yet
    cached) is timed apart; each page then opens in a new tab of the same browser, as a person
    who has the UI open goes from page to page."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        raise SystemExit("the UI figures need Playwright: pip install playwright") from e
    flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=flags)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        for name, (path, text) in {"first visit": ("/overview", "Overview"), **PAGES}.items():
            times: list[float] = []
            quiet: list[float] = []
            errors: list[str] = []
            queries: dict[str, float] = {}
            busy: list[float] = []
            cpu: list[float] = []
            started: list[int] = []
            for _ in range(1 if name == "first visit" else loads):
                started.append(_in_progress(dev))
                page = context.new_page()
                cdp = context.new_cdp_session(page)
                cdp.send("Performance.enable")
                page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(m.text))
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.on("requestfinished", lambda r, queries=queries: _timed(r, queries))
                began = time.perf_counter()
                page.goto(dev.url + path, wait_until="domcontentloaded", timeout=120_000)
                page.get_by_text(text.format(key=key), exact=False).first.wait_for(timeout=120_000)
                times.append(time.perf_counter() - began)
                metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
                # TaskDuration is the page's tasks' wall time, waits for a core included; ThreadTime
                # is its main thread's CPU time: the gap is what the processes beside it took.
                busy.append(round(metrics["TaskDuration"], 2))
                cpu.append(round(metrics["ThreadTime"], 2))
                page.wait_for_load_state("networkidle", timeout=120_000)
                quiet.append(time.perf_counter() - began)
                page.screenshot(path=str(where / f"page-{name.replace(' ', '-')}.png"))
                page.close()
            slowest = sorted(queries.items(), key=lambda q: -q[1])[:3]
            out[name] = {"seconds": round(statistics.median(times), 2), "loads": [round(t, 2) for t in times],
                         "network_quiet_seconds": round(statistics.median(quiet), 2),
                         "browser_busy_seconds": busy, "browser_cpu_seconds": cpu,
                         "runs_in_progress": started,
                         "console_errors": errors, "slowest_queries_ms": dict(slowest)}  # fmt: skip
        browser.close()
    return out


def _in_progress(dev) -> int:
    """Runs started and not ended as a page is loaded: their workers share the machine's cores."""
    answer = dev.graphql(IN_PROGRESS)["runsOrError"]
    if "results" not in answer:
        raise RuntimeError(f"the runs in progress could not be read: {answer}")
    return len(answer["results"])


def _timed(request, queries: dict[str, float]) -> None:
    """The longest a GraphQL query of this name took, from its request's start to its response's end."""
    if "/graphql" not in request.url:
        return
    try:
        name = (request.post_data_json or {}).get("operationName") or request.url.rpartition("op=")[2] or "?"
    except ValueError:
        name = request.url.rpartition("op=")[2] or "?"
    took = request.timing.get("responseEnd", -1)
    queries[name] = max(queries.get(name, 0.0), round(took))


def _instance(home: Path, url: str):
    """The deployment's own instance (its dagster.yaml, its Postgres), opened from this process."""
    import os

    import dagster as dg

    os.environ["DAGSTER_PG_URL"] = url
    return dg.DagsterInstance.from_config(str(home))


def _add_partitions(home: Path, url: str, count: int) -> None:
    """Partitions of checkpoints that are not there: a schedule's evaluation reads only the names."""
    with _instance(home, url) as instance:
        instance.add_dynamic_partitions("checkpoints", [f"{ROOT}:extra/q{i:05d}" for i in range(count)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", type=int, default=2000)
    p.add_argument("--due", type=int, default=40)
    p.add_argument("--no-baseline", action="store_true", help="leave out the one-run-per-checkpoint phase")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fleet-deployment-"))
    summary: dict = {"checkpoints": args.checkpoints, "due": args.due}
    if not args.no_baseline:
        one = phase(work, "one_per_run", args, {"CKPT_COMPACTION_RUN_MAX_CHECKPOINTS": "1"}, schedules=False)
        summary["one run per checkpoint"] = one
    summary["batched"] = batched = phase(work, "batched", args, {}, schedules=True)
    if not args.no_baseline:
        summary["time_ratio_batched_to_one_per_run"] = round(
            batched["seconds_first_tick_to_all_compacted"] / one["seconds_first_tick_to_all_compacted"], 3
        )
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
