"""`ckpt repartition` and `ckpt state-profile`: Spark's repartitioner, guarded, proven, reversible.

Proof by the real queries: a repartitioned copy of a corpus checkpoint and an untouched copy are
restarted with the same further input; both must emit the same rows and end with the same state
(Spark's state data source, every store, compared without the partition each row sits in).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from checkpoint.errors import RepartitionFailed
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.head import load_head
from checkpoint.repartition import RepartitionOptions, repartition_checkpoint
from checkpoint.repartition.guards import state_readers
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.safety.lease import lease_for
from checkpoint.storage import Storage
from testbed.clock import date_back
from testbed.copying import copy_checkpoint
from testbed.operators import ensure_operator_corpus, scenario_named
from testbed.restart import differences, restart
from testbed.restart import untouched as untouched_restart
from tests.support.cli import CKPT, ckpt
from tests.support.files import digests_of
from tests.support.leases import lapse_leases
from tests.support.planning import apply_unleased, candidates_of, plan_later

# A real checkpoint for every operator Spark's repartitioner supports: the main corpus's, then the
# operator corpus's (testbed/operators.py).
OPERATORS = {
    "snapshots": "aggregation",
    "watermark": "windowed aggregation",
    "dedup_agg": "dropDuplicates, then aggregation",
    "join": "stream-stream join, state format 2",
    "join_cf": "stream-stream join, state format 3 (column families)",
    "list_state": "transformWithStateInPandas, ListState",
    "session_window": "session window",
    "pandas_state": "applyInPandasWithState",
    "every_state": "transformWithStateInPandas, value, list and map state with TTLs",
    "timers": "transformWithStateInPandas, event-time timers",
}


@pytest.fixture(scope="session")
def operator_corpus() -> Path:
    return ensure_operator_corpus()


@pytest.fixture
def real(corpus_root, operator_corpus):
    """(the scenario's folder, its checkpoint) of a checkpoint of either corpus."""

    def find(name: str) -> tuple[Path, Path]:
        root = corpus_root if (corpus_root / name).is_dir() else operator_corpus
        return root / name, root / name / "checkpoint"

    return find


def assert_restarts_like_untouched(
    spark, name: str, scenario_dir: Path, changed: Path, untouched: Path, tmp: Path
) -> None:
    extra = tmp / "more-input"
    control = untouched_restart(spark, "emitted and state", name, scenario_dir, untouched, {},
                                lambda: restart(spark, name, scenario_dir, untouched, extra))  # fmt: skip
    assert not differences(restart(spark, name, scenario_dir, changed, extra), control)


def _pair(original: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of a checkpoint: one to change, one untouched to restart beside it."""
    return copy_checkpoint(original, tmp_path / "changed"), copy_checkpoint(original, tmp_path / "untouched")


def _run(ports, path: Path, partitions: int, **kwargs):
    storage = Storage(str(path))
    audit = AuditTrail(AuditTrail.default_for(storage.url))
    # A corpus generated minutes ago (a cold cache) looks like a running query: the quiet period has
    # its own test.
    request = InPlace(storage, taken_at_once("tests"), audit)
    options = RepartitionOptions(partitions, ports.repartition, **{"quiet_seconds": 0, **kwargs})
    return repartition_checkpoint(request, options)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_each_operator_repartitioned_4_to_8_restarts_like_an_untouched_copy(
    ports, spark, real, tmp_path, name
) -> None:
    scenario_dir, original = real(name)
    changed, untouched = _pair(original, tmp_path)
    before = load_checkpoint(str(changed)).latest_committed_batch

    result = _run(ports, changed, 8)

    assert (result.from_partitions, result.to_partitions, result.batch) == (4, 8, before + 1)
    assert result.stores and all(s.digest_before == s.digest_after for s in result.stores)
    assert all(s.misplaced == 0 for s in result.stores)
    assert sorted(p.name for p in (changed / "state/0").iterdir() if p.name.isdigit()) == [
        str(i) for i in range(8)
    ]
    assert ckpt("validate", str(changed)).returncode == 0
    assert_restarts_like_untouched(spark, name, scenario_dir, changed, untouched, tmp_path)


def test_after_4_to_3_the_product_handles_the_batch_and_cleanup_takes_the_stale_folder(
    ports, spark, corpus, corpus_root, tmp_path
) -> None:
    changed, untouched = _pair(corpus["snapshots"], tmp_path)
    result = _run(ports, changed, 3)
    assert (result.from_partitions, result.to_partitions) == (4, 3)

    # A batch that reads no new input, and a folder that no new batch names: nothing is an error.
    assert ckpt("validate", str(changed)).returncode == 0
    lineage = json.loads(ckpt("lineage", str(changed), "--json").stdout)
    assert sorted(e["partition"] for e in lineage["stores"]) == [0, 1, 2]
    assert ckpt("fleet", str(tmp_path), "--json").returncode == 0
    forked = tmp_path / "forked"
    assert ckpt("fork", str(changed), str(forked)).returncode == 0
    assert not (forked / "state/0/3").exists() and ckpt("validate", str(forked)).returncode == 0
    assert ckpt("compact", str(changed), "--min-chain", "1").returncode == 0

    # Cleanup: once no retained batch reads partition 3, every file of its folder goes.
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(changed, audit=audit, retain_batches=1)
    stale = {str(p.relative_to(changed)) for p in (changed / "state/0/3").rglob("*") if p.is_file()}
    assert stale and stale <= {c.path for c in candidates_of(plan, audit)}
    applied = apply_unleased(plan, Storage(str(changed)), audit)
    assert not applied.failed.files and not [p for p in (changed / "state/0/3").rglob("*") if p.is_file()]
    assert ckpt("validate", str(changed)).returncode == 0
    assert_restarts_like_untouched(
        spark, "snapshots", corpus_root / "snapshots", changed, untouched, tmp_path
    )


def test_a_verification_failure_is_undone_byte_for_byte_and_the_query_restarts(
    ports, spark, corpus, corpus_root, tmp_path
) -> None:
    changed, untouched = _pair(corpus["snapshots"], tmp_path)
    before = digests_of(changed)
    batch = load_checkpoint(str(changed)).latest_committed_batch

    def damage() -> None:  # one zip Spark just wrote, in a partition folder it created
        zips = sorted((changed / "state/0/6").glob(f"{batch + 2}_*.zip"))
        assert zips, "Spark wrote no zip to damage"
        zips[0].write_bytes(zips[0].read_bytes()[:100])

    with pytest.raises(RepartitionFailed, match="the checkpoint is as it was before"):
        _run(ports, changed, 8, after_rewrite=damage)
    assert digests_of(changed) == before
    assert not (changed / "state/0/6").exists()
    record = AuditTrail.default_for(str(changed))
    finished = list(Path(record).rglob("*.finished.json"))
    assert len(finished) == 1 and json.loads(finished[0].read_text())["outcome"] == "undone"
    started = json.loads(next(Path(record).rglob("*.started.json")).read_text())
    assert started["backup_linked_files"] > 0  # beside the checkpoint: hard links, no copy
    assert ckpt("validate", started["backup"]).returncode == 0
    assert_restarts_like_untouched(
        spark, "snapshots", corpus_root / "snapshots", changed, untouched, tmp_path
    )


def test_undo_on_request_puts_the_checkpoint_back_and_refuses_once_the_query_ran(
    ports, spark, corpus, corpus_root, tmp_path
) -> None:
    path = tmp_path / "ckpt"
    copy_checkpoint(corpus["dedup_agg"], path)
    before = digests_of(path)
    _run(ports, path, 8)
    # Its batch was written a moment ago: a query restarted since could be running on it.
    _refusal(["--undo"], path, "newer than the quiet period")
    out = ckpt("repartition", str(path), "--undo", "--query-stopped", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["outcome"] == "undone"
    assert digests_of(path) == before
    again = ckpt("repartition", str(path), "--undo", "--query-stopped")
    assert again.returncode == 2 and "already undone" in again.stderr

    _run(ports, path, 8)
    scenario_named("dedup_agg").restart(spark, corpus_root / "dedup_agg", path, tmp_path / "more")
    refused = ckpt("repartition", str(path), "--undo", "--query-stopped")
    assert refused.returncode == 2 and "after repartition batch" in refused.stderr


def test_undo_takes_back_the_operator_metadata_and_schemas_a_transform_with_state_repartition_wrote(
    ports, corpus, tmp_path
) -> None:
    """transformWithState keeps operator metadata v2 (`_metadata/v2/<batch>`) and schema files
    (`_stateSchema/`) per batch; a repartition writes them for its own batch. The undo used to leave
    them behind, naming a batch that no longer exists. Now the whole tree is as it was."""
    path = tmp_path / "ckpt"
    copy_checkpoint(corpus["list_state"], path)
    before = digests_of(path)
    _run(ports, path, 8)
    written = set(digests_of(path)) - set(before)
    assert any("/_metadata/v2/" in rel for rel in written), sorted(written)[:20]
    out = ckpt("repartition", str(path), "--undo", "--query-stopped", "--json")
    assert out.returncode == 0, out.stderr
    assert digests_of(path) == before


def _refusal(args: list[str], path: Path, message: str) -> None:
    before = digests_of(path)
    out = ckpt("repartition", str(path), *args)
    assert out.returncode == 2, (args, out.stdout, out.stderr)
    assert message in out.stderr and out.stderr.count("\n") == 1 and not out.stdout, out.stderr
    assert digests_of(path) == before


def test_refusals_exit_2_with_one_line_and_change_no_byte(corpus, tmp_path) -> None:
    path = tmp_path / "ckpt"
    copy_checkpoint(corpus["snapshots"], path)
    hours_ago = time.time() - 7200
    for log in [*path.glob("commits/*"), *path.glob("offsets/*")]:
        os.utime(log, (hours_ago, hours_ago))  # stopped two hours ago
    _refusal(["--partitions", "4"], path, "the query already has 4 state partitions")
    commit = path / "commits" / str(load_checkpoint(str(path)).latest_committed_batch)
    os.utime(commit)  # a commit written just now: the query may be running
    _refusal(["--partitions", "8"], path, "the query may be running")
    os.utime(commit, (hours_ago, hours_ago))
    with lease_for(Storage(str(path)), owner="another action").acquire():
        _refusal(["--partitions", "8"], path, "another action")
    metadata = path / "state/0/_metadata/metadata"
    metadata.write_text(metadata.read_text().replace("stateStoreSave", "StatefulStreamlineAggregate"))
    (metadata.parent / ".metadata.crc").unlink(missing_ok=True)
    _refusal(["--partitions", "8"], path, "does not support operator 0 (StatefulStreamlineAggregate)")


def test_a_rerun_after_kill_9_during_the_rewrite_finishes_it(spark, corpus, corpus_root, tmp_path) -> None:
    changed, untouched = _pair(corpus["snapshots"], tmp_path)
    audit = Path(AuditTrail.default_for(str(changed)))
    child = subprocess.Popen(
        [
            CKPT,
            "repartition",
            str(changed),
            "--partitions",
            "8",
            "--quiet-period",
            "0s",
            "--unsafe-short-quiet-period",
            "--lease-ttl",
            "10m",
        ],
        start_new_session=True,  # the driver's JVM is in this group: kill both at once
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not list(audit.rglob("*.started.json")):
        assert child.poll() is None and time.monotonic() < deadline, (
            "the repartition ended before it was killed"
        )
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    lapse_leases(changed)
    other = ckpt(
        "repartition",
        str(changed),
        "--partitions",
        "5",
        "--quiet-period",
        "0s",
        "--unsafe-short-quiet-period",
    )
    assert other.returncode == 2 and "--partitions 8" in other.stderr, other.stderr
    out = ckpt(
        "repartition",
        str(changed),
        "--partitions",
        "8",
        "--quiet-period",
        "0s",
        "--unsafe-short-quiet-period",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["outcome"] == "repartitioned" and all(
        s["digest_before"] == s["digest_after"] for s in doc["stores"]
    )
    assert_restarts_like_untouched(
        spark, "snapshots", corpus_root / "snapshots", changed, untouched, tmp_path
    )


def test_the_profile_predicts_the_partition_of_every_key(ports, corpus, tmp_path) -> None:
    path = tmp_path / "ckpt"
    copy_checkpoint(corpus["join"], path)
    out = ckpt("state-profile", str(path), "--candidates", "3,8", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    head = doc["operators"][0]
    assert [p["partition"] for p in head["partitions"]] == [0, 1, 2, 3] and all(
        p["bytes"] > 0 for p in head["partitions"]
    )
    predicted = doc["predicted"][0]
    assert predicted["self_check"]["ok"] and sum(predicted["now"]) == predicted["rows"]
    _run(ports, path, 8)
    ckpt_after = load_head(str(path))
    reader = next(r for r in state_readers(ckpt_after) if r.store == predicted["store"])
    now = ports.rows_per_partition(str(path), ckpt_after.latest_committed_batch, reader, [8])
    assert (
        [now[0].get(p, 0) for p in range(8)]
        == predicted["candidates"]["8"]["rows"]
        == [now[8][p] for p in range(8)]
    )


def test_refused_before_spark_starts(corpus, tmp_path) -> None:
    """A refusal costs no Spark session: preflight runs first."""
    path = tmp_path / "ckpt"
    copy_checkpoint(corpus["format_v1"], path)
    date_back(path, 2 * 3600)  # stopped two hours ago, however old the cached corpus is
    out = ckpt("repartition", str(path), "--partitions", "4")
    assert out.returncode == 2 and "already has 4 state partitions" in out.stderr
    assert "log4j" not in out.stderr and "Spark" not in out.stderr
