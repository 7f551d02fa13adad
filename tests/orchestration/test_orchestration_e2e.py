"""The product as people deploy it: docs/dagster.md's recipe (Postgres, a gRPC code server, the daemon
and the webserver, each its own process) on loopback, driven through its GraphQL API and a headless
Chromium, while a real streaming query keeps committing beside it.

One deployment serves the whole module. Its root holds a cleanup candidate (`orders`, dated past
the grace period), a delta-only chain (`chain`) and the live query's checkpoint (`stream`), which
only the commit sensor's runs maintain: no backfill or fork of the other tests takes its lease. The
discovery and commit sensors run as they would in production, only with a 15 s commit interval.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import checkpoint_lineage
from jobs.spark_session import scoped_confs
from testbed.clock import date_back
from testbed.copying import copy_checkpoint
from testbed.deployment import PROJECT, deployment
from testbed.postgres import postgres_server
from testbed.queries import NO_SNAPSHOTS, _keyed_rows, aggregation, write_inputs
from tests.support.state import control_state, latest_state

pytestmark = pytest.mark.slow
LOCATION = "ckpt-maint"  # deploy/workspace.yaml's name for the code server
ARTIFACTS = Path(os.environ.get("CKPT_TEST_ARTIFACTS", PROJECT / "test-artifacts"))
LIVE_MINUTES = 3.0
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


class LiveQuery:
    """An aggregation with snapshots off, fed a small file every 4 s until told to stop: a chain
    long enough to compact (`Policy.long_chain`, 10) in about 40 s, so the commit sensor's
    compactions come every minute or so, each a run with a Spark of its own."""

    def __init__(self, spark, inputs: Path, checkpoint: Path):
        self.spark, self.inputs, self.checkpoint = spark, inputs, checkpoint
        self.stop_feeding = threading.Event()
        self.files = 2
        write_inputs(inputs, self.files, _keyed_rows)
        with scoped_confs(spark, NO_SNAPSHOTS):
            self.query = (
                aggregation(spark, {"": str(inputs)})
                .writeStream.outputMode("update")
                .option("checkpointLocation", str(checkpoint))
                .format("noop")
                .trigger(processingTime="500 milliseconds")
                .start()
            )
        self.found = time.monotonic()  # set again once the deployment's discovery has found it
        self.feeder = threading.Thread(target=self._feed, daemon=True)
        self.feeder.start()

    def _feed(self) -> None:
        while not self.stop_feeding.wait(4.0):
            write_inputs(self.inputs, 1, _keyed_rows, start=self.files)
            self.files += 1

    def finish(self) -> None:
        self.stop_feeding.set()
        self.feeder.join()
        self.query.processAllAvailable()
        self.query.stop()


@pytest.fixture(scope="module")
def setup(spark, corpus, tmp_path_factory):
    base = tmp_path_factory.mktemp("e2e")
    root = base / "root"
    # Both are stopped queries, dated past the grace and quiet periods however fresh the corpus
    # cache is: cleanup may delete, and compaction takes the newest committed version.
    for name, folder in (("two_actions", "orders"), ("long_chain", "chain")):
        copy_checkpoint(corpus[name], root / folder)
        date_back(root / folder, 8 * 3600)
    live = LiveQuery(spark, base / "live-input", root / "stream")
    deadline = time.monotonic() + 120
    while not (root / "stream" / "commits" / "0").exists():  # discovery must find it at the first tick
        assert time.monotonic() < deadline and live.query.exception() is None
        time.sleep(0.5)
    env = {
        "CKPT_ROOTS": json.dumps([{"name": "e2e", "url": str(root)}]),
        "CKPT_COMMIT_SENSOR_INTERVAL": "15",
        "CKPT_COMPACTION_GATHER": "10s",
        "CKPT_SPARK_MASTER": "local[1]",
    }
    try:
        # On Postgres, as deployments run Dagster (`make demo` keeps SQLite, and the in-process
        # Dagster tests run on SQLite): the run queue's tag limits are its queries there.
        with postgres_server() as url, deployment(base / "dagster_home", env, url) as dev:
            keys = dev.wait_for("discovery of the three checkpoints", lambda: _partitions(dev) or None, 180)
            assert keys == ["e2e:chain", "e2e:orders", "e2e:stream"]
            live.found = time.monotonic()  # the commit sensor looks at it from here on
            yield dev, root, live, base
    finally:
        if live.query.isActive:
            live.query.stop()


def _partitions(dev) -> list[str]:
    q = '{ assetNodeOrError(assetKey: {path: ["checkpoint_inventory"]}) {'
    q += " ... on AssetNode { partitionKeys } } }"
    keys = sorted(dev.graphql(q)["assetNodeOrError"]["partitionKeys"])
    return keys if len(keys) == 3 else []


RUNS = """query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) { ... on Runs {
  results { runId jobName status tags { key value } } } } }"""


def _runs(dev, **tags) -> list[dict]:
    filters = [{"key": k.replace("__", "/"), "value": v} for k, v in tags.items()]
    return dev.graphql(RUNS, tags=filters)["runsOrError"]["results"]


def _tag(run: dict, key: str) -> str | None:
    return next((t["value"] for t in run["tags"] if t["key"] == key), None)


def _failures(dev, runs: list[dict]) -> list[str]:
    """Why each failed run failed, in the words of its step failures: what an assertion should show."""
    q = """query($id: ID!) { runOrError(runId: $id) { ... on Run { eventConnection(limit: 1000) { events {
      __typename ... on ExecutionStepFailureEvent { stepKey error { message } } } } } } }"""
    found = []
    for run in runs:
        if run["status"] != "FAILURE":
            continue
        events = dev.graphql(q, id=run["runId"])["runOrError"]["eventConnection"]["events"]
        steps = [f"{e['stepKey']}: {e['error']['message'][:800]}" for e in events if e.get("error")]
        found.append(f"{run['jobName']} {_tag(run, 'dagster/run_key')}: {steps or 'no step failed'}")
    return found


def _backfill(dev, assets: list[str], partitions: list[str] | None = None) -> str:
    params: dict = {"assetSelection": [{"path": [a]} for a in assets]}
    params.update({"partitionNames": partitions} if partitions else {"allPartitions": True})
    out = dev.graphql(
        """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
             __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }""",
        p=params,
    )["launchPartitionBackfill"]
    assert out["__typename"] == "LaunchBackfillSuccess", out
    backfill = out["backfillId"]

    def done():
        q = """query($id: String!) {
            partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } } }"""
        status = dev.graphql(q, id=backfill)["partitionBackfillOrError"]["status"]
        runs = _runs(dev, dagster__backfill=backfill)
        if status in ("REQUESTED", "CANCELING") or any(r["status"] not in FINISHED for r in runs):
            return None
        return status

    assert dev.wait_for(f"backfill {backfill}", done, 600, every=3) in ("COMPLETED", "COMPLETED_SUCCESS")
    return backfill


def _start(dev, job: str, partition: str | None, run_config: dict | None = None, **tags: str) -> str:
    """Launches a run as the Launchpad does; returns its id at once."""
    all_tags = [{"key": "dagster/partition", "value": partition}] if partition else []
    all_tags += [{"key": k, "value": v} for k, v in tags.items()]
    params = {
        "selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "jobName": job},
        "executionMetadata": {"tags": all_tags},
        **({"runConfigData": run_config} if run_config else {}),
    }
    out = dev.graphql(
        """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
             __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
        p=params,
    )["launchRun"]
    assert out["__typename"] == "LaunchRunSuccess", out
    return out["run"]["runId"]


def _finished(dev, run_id: str) -> str:
    def status():
        q = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"
        found = dev.graphql(q, id=run_id)["runOrError"]["status"]
        return found if found in FINISHED else None

    return dev.wait_for(f"run {run_id}", status, 600, every=3)


def _launch(dev, job: str, partition: str | None, run_config: dict | None = None, **tags: str) -> str:
    run_id = _start(dev, job, partition, run_config, **tags)
    status = _finished(dev, run_id)
    assert status == "SUCCESS", _failures(
        dev, [{"runId": run_id, "status": status, "jobName": job, "tags": []}]
    )
    return run_id


def _materializations(dev, asset: str, partition: str, limit: int = 1, some: bool = True) -> list[dict]:
    """Metadata of the newest materializations, newest first, each with its run id (at least one
    unless `some` is False)."""
    q = """query($a: [String!]!, $p: [String!], $n: Int) { assetNodeOrError(assetKey: {path: $a}) {
      ... on AssetNode { assetMaterializations(partitions: $p, limit: $n) { runId metadataEntries {
        label __typename
        ... on IntMetadataEntry { intValue } ... on BoolMetadataEntry { boolValue }
        ... on TextMetadataEntry { text } ... on MarkdownMetadataEntry { mdStr }
        ... on PathMetadataEntry { path } } } } } }"""
    mats = dev.graphql(q, a=[asset], p=[partition], n=limit)["assetNodeOrError"]["assetMaterializations"]
    assert mats or not some, (asset, partition)
    return [
        {
            "run_id": mat["runId"],
            **{
                e["label"]: next((v for k, v in e.items() if k not in ("label", "__typename")), None)
                for e in mat["metadataEntries"]
            },
        }
        for mat in mats
    ]


def _metadata(dev, asset: str, partition: str) -> dict:
    return _materializations(dev, asset, partition)[0]


def test_an_audit_backfill_and_a_maintenance_run_through_graphql(setup) -> None:
    dev, root, _, _ = setup
    backfill = _backfill(dev, ["checkpoint_inventory", "checkpoint_lineage_report"])
    (run,) = _runs(dev, dagster__backfill=backfill)  # all partitions: one range, one run
    assert run["status"] == "SUCCESS"
    ends = (_tag(run, "dagster/asset_partition_range_start"), _tag(run, "dagster/asset_partition_range_end"))
    assert ends == ("e2e:chain", "e2e:stream")
    ranged = _metadata(dev, "checkpoint_lineage_report", "e2e:orders")
    assert ranged["run_id"] == run["runId"] and ranged["checkpoints"] == 3
    assert "e2e:orders" in ranged["checkpoints_table"]
    # the range recorded each checkpoint's result of each check, for its partition, and none for the range
    found = [e for e in dev.graphql(RANGED)["assetCheckExecutions"] if e["runId"] == run["runId"]]
    assert sorted(e["partition"] for e in found) == ["e2e:chain", "e2e:orders", "e2e:stream"], found
    by = {e["partition"]: (e["status"], e["evaluation"]["severity"]) for e in found}
    # A long chain warns (which checkpoint's, at that moment, depends on the compactions before).
    assert all(status == "SUCCEEDED" or severity == "WARN" for status, severity in by.values()), by

    before = {p.relative_to(root).as_posix() for p in (root / "orders").rglob("*") if p.is_file()}
    run_id = _launch(dev, "checkpoint_maintenance", "e2e:orders", **{"ckpt/apply": "true"})
    lineage = _metadata(dev, "checkpoint_lineage_report", "e2e:orders")
    stores = sum(
        len(op.store_names) * op.num_partitions
        for op in load_checkpoint(str(root / "orders")).operators.values()
    )
    assert lineage["run_id"] == run_id and lineage["stores"] == stores > 0
    cleanup = _metadata(dev, "checkpoint_orphan_cleanup", "e2e:orders")
    plan = _metadata(dev, "checkpoint_orphan_plan", "e2e:orders")
    assert cleanup["run_id"] == run_id and cleanup["applied"] is True
    assert cleanup["deleted_files"] == plan["files"] > 0 and cleanup["failed_files"] == 0
    after = {p.relative_to(root).as_posix() for p in (root / "orders").rglob("*") if p.is_file()}
    assert len(before - after) == plan["files"] and not after - before
    outcomes = Path(cleanup["outcomes"])
    assert sum(1 for line in outcomes.read_text().splitlines() if '"deleted"' in line) == plan["files"]


def test_a_compaction_backfill_is_one_run_and_one_spark_job(setup) -> None:
    dev, root, _, _ = setup
    # Both stopped checkpoints (a contiguous range of partitions); the live one is the sensor's alone.
    backfill = _backfill(dev, ["checkpoint_compaction"], ["e2e:chain", "e2e:orders"])
    runs = _runs(dev, dagster__backfill=backfill)
    assert len(runs) == 1 and runs[0]["status"] == "SUCCESS"
    assert (
        _tag(runs[0], "dagster/asset_partition_range_start"),
        _tag(runs[0], "dagster/asset_partition_range_end"),
    ) == ("e2e:chain", "e2e:orders")
    ckpt = load_checkpoint(str(root / "chain"))
    assert {e.chain_length for e in checkpoint_lineage(ckpt)} == {0}  # every store loads a snapshot now
    meta = _metadata(dev, "checkpoint_compaction", "e2e:chain")
    assert meta["max_chain_after"] == 0


def test_a_validation_launched_behind_compactions_starts_before_them(setup) -> None:
    """Two compaction runs, then a validation run, launched one after the other: the second
    compaction waits in the queue, not in a run slot, until the first has ended (one compacting
    run at a time, `ckpt/compacts`), and the validation (priority 20 to their 0) is not stuck
    behind it. Read from Dagster's own records of the runs."""
    dev, *_ = setup
    first = _start(dev, "compact_checkpoints", "e2e:chain")
    second = _start(dev, "compact_checkpoints", "e2e:orders")
    config = {"ops": {"validate_each": {"config": {"partitions": ["e2e:chain", "e2e:orders"]}}}}
    check = _start(dev, "validate_checkpoints", None, run_config=config)
    assert [_finished(dev, run) for run in (first, second, check)] == ["SUCCESS"] * 3
    runs = {r["runId"]: r for r in dev.graphql(TIMES)["runsOrError"]["results"]}
    assert {_tag(runs[r], "ckpt/compacts") for r in (first, second)} == {"true"}
    assert _tag(runs[check], "dagster/priority") == "20"
    spans = sorted((runs[r]["startTime"], runs[r]["endTime"]) for r in (first, second))
    assert spans[1][0] >= spans[0][1], spans  # never two compacting runs at once
    assert runs[check]["startTime"] <= spans[1][0], (runs[check], spans)
    # the batched validation recorded each checkpoint's result of each check, for its partition
    for partition in ("e2e:chain", "e2e:orders"):
        found = dev.graphql(CHECKS, p=partition)["assetCheckExecutions"]
        assert any(e["runId"] == check and e["status"] == "SUCCEEDED" for e in found), (partition, found)
        assert all(e["partition"] == partition for e in found), found


# Every partition's executions, with the severity a failure had (a long chain warns).
RANGED = """{ assetCheckExecutions(assetKey: {path: ["checkpoint_lineage_report"]},
  checkName: "lineage_completeness", limit: 20) { runId status partition evaluation { severity } } }"""
CHECKS = """query($p: String) { assetCheckExecutions(assetKey: {path: ["checkpoint_lineage_report"]},
  checkName: "lineage_completeness", partition: $p, limit: 20) { runId status partition } }"""


def test_the_recipe_starts_with_no_error_in_its_logs(setup) -> None:
    """The daemon and the webserver, started once the code server answers (the recipe's order),
    never find its location unreachable."""
    dev, *_ = setup
    for name in ("dagster-daemon", "dagster-webserver"):
        text = (Path(dev.log) / f"{name}.log").read_text(errors="replace")
        assert "DagsterUserCodeUnreachableError" not in text, text[-3000:]


def _chromium(base: Path, url: str, shot_name: str, expect: tuple[str, ...]) -> str:
    """A screenshot of a UI page into test-artifacts/, and the page's DOM once it shows `expect`.

    The UI fetches its data after the page loads: on a loaded machine one virtual-time budget can
    end before the data arrives, so the page is loaded again (three times at most) until it shows.
    One start of Chromium gives both the DOM and the screenshot.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / shot_name
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1600,1000", "--virtual-time-budget=20000", f"--screenshot={shot}"]  # fmt: skip
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    profile = base / f"chrome-{shot.stem}"
    dom = ""
    for attempt in range(3):
        shot.unlink(missing_ok=True)
        dom = subprocess.run([chromium, *flags, f"--user-data-dir={profile}-{attempt}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=180, check=True).stdout  # fmt: skip
        if all(text in dom for text in expect):
            break
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return dom


def test_the_asset_graph_in_headless_chromium(setup) -> None:
    dev, _, _, base = setup
    groups = ("checkpoint_audit", "checkpoint_compaction", "checkpoint_cleanup")
    dom = _chromium(base, f"{dev.url}/asset-groups", "asset-graph.png", ("Global asset lineage", *groups))
    assert "Global asset lineage" in dom
    for group in groups:
        assert group in dom, group


def test_the_fleet_report_page_shows_every_checkpoint(setup) -> None:
    dev, _, _, base = setup
    _launch(dev, "checkpoint_fleet", None)
    keys = ("e2e:chain", "e2e:stream", "e2e:orders")
    dom = _chromium(base, f"{dev.url}/assets/checkpoint_fleet_report", "fleet-report.png", keys)
    for key in keys:
        assert key in dom, key


def test_a_fork_from_the_launchpad(setup, spark) -> None:
    """The Launchpad's config, sent as the UI sends it."""
    from tests.support.state import read_state

    dev, root, _, base = setup
    dest = root / "forks" / "chain"  # a destination must lie under a configured root
    config = {"source_partition": "e2e:chain", "destination": str(dest), "new_query_id": True}
    _launch(dev, "fork_checkpoint", None, run_config={"ops": {"fork": {"config": config}}})
    done = json.loads((dest / "_ckpt_fork.complete.json").read_text())
    assert done["files"] > 0 and done["copied_files"] == done["files"]
    batch = done["batch"]
    assert load_checkpoint(str(dest)).latest_committed_batch == batch
    assert read_state(spark, dest, batch, "aggregation") == read_state(
        spark, root / "chain", batch, "aggregation"
    )


def test_the_live_query_survives_maintenance_fired_by_the_commit_sensor(setup, spark) -> None:
    """For LIVE_MINUTES from discovery's finding the live query (the module's set-up: the other
    tests' runs went on beside it, and only then is it looked at), the commit sensor compacts its
    chain as it crosses the threshold. What must hold: the query never fails, and some
    sensor-fired compaction shortened the chain. A run that waited for the lease and gave up is an
    expected outcome on a busy checkpoint, not a failure; any other failed run is."""
    dev, root, live, base = setup

    def sensor_runs() -> list[dict]:
        """The commit sensor's batched compactions (here each names the live query alone)."""
        return [r for r in _runs(dev, ckpt__kind="compaction") if _tag(r, "dagster/sensor_name")]

    def shortened() -> list[dict]:
        by_sensor = {r["runId"] for r in sensor_runs() if r["status"] == "SUCCESS"}
        compactions = _materializations(dev, "checkpoint_compaction", "e2e:stream", limit=100, some=False)
        return [m for m in compactions
                if m["run_id"] in by_sensor and m["max_chain_after"] < m["max_chain_before"]]  # fmt: skip

    def enough():
        assert live.query.exception() is None
        return (time.monotonic() - live.found) / 60 >= LIVE_MINUTES and bool(shortened())

    dev.wait_for("a sensor-fired compaction of the live query", enough, 900, every=5)
    assert live.query.exception() is None
    failures = [f for f in _failures(dev, sensor_runs()) if "maintenance lease" not in f]
    assert not failures, failures
    assert all(m["stores_compacted"] >= 1 for m in shortened())
    assert list((root / "stream" / "state").rglob("*.zip"))  # snapshots no Spark task wrote
    live.finish()

    state = latest_state(spark, root / "stream", "aggregation")
    assert state and state == control_state(spark, live.inputs, base / "control", NO_SNAPSHOTS)


TIMES = """{ runsOrError { ... on Runs { results { runId jobName startTime endTime status
  tags { key value } } } } }"""


def test_no_two_runs_of_one_checkpoint_and_no_two_compacting_runs_overlapped(setup) -> None:
    """The run queue's tag limits (deploy/dagster.yaml), kept by Dagster's Postgres storage: every
    run of the module so far that names one checkpoint started after the one before it on that
    checkpoint had ended; and every run that compacts (the sensor's batched runs among them), after
    the one before it had ended."""
    dev, *_ = setup
    runs = [r for r in dev.graphql(TIMES)["runsOrError"]["results"] if r["startTime"]]
    groups: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        span = (run["startTime"], run["endTime"] or float("inf"))
        key = _tag(run, "dagster/partition")
        if key:
            groups.setdefault(key, []).append(span)
        if _tag(run, "ckpt/compacts") == "true":
            groups.setdefault("compacting runs", []).append(span)
    assert sum(map(len, groups.values())) >= 6, runs  # maintenance, compactions, the sensor's runs
    assert len(groups["compacting runs"]) >= 4, runs
    for key, spans in groups.items():
        spans.sort()
        for (_, ended), (began, _) in zip(spans, spans[1:], strict=False):
            assert began >= ended, (key, spans)
