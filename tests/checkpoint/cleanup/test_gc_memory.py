"""Cleanup planning needs memory for one state partition and the retained set, not for the
checkpoint: the peak traced allocation of a plan stays put when the history grows tenfold."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from checkpoint.safety import AuditTrail, Plan
from checkpoint.storage import Storage
from testbed import synthetic
from tests.support.cli import CKPT
from tests.support.planning import plan_of

PARTITIONS, VERSIONS, WINDOW = 8, 120, 20


def _traced(path: Path, audit: AuditTrail) -> tuple[Plan, int]:
    tracemalloc.start()
    try:
        # In this process: worker processes would hold the partitions where tracemalloc cannot see.
        plan = plan_of(Storage(str(path)), audit, now=time.time(), workers=0)
        return plan, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.stress
@pytest.mark.parametrize("hdfs", [False, True], ids=["rocksdb_v2", "hdfs_v1"])
def test_ten_times_the_history_costs_no_more_memory(tmp_path, hdfs) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    n_small = synthetic.build(small, PARTITIONS, VERSIONS, window=WINDOW, hdfs=hdfs)
    # The same retained set, ten times the files: nine partition folders of history for each one
    # the commit log names (what a repartition to fewer partitions leaves behind).
    n_big = synthetic.build(
        big, 10 * PARTITIONS, VERSIONS, window=WINDOW, committed_partitions=PARTITIONS, hdfs=hdfs
    )
    assert n_big >= 9.5 * n_small
    audit = AuditTrail(str(tmp_path / "audit"))
    _traced(small, audit)  # warm: imports and first-use caches are not the plan's memory
    plan_small, peak_small = _traced(small, audit)
    plan_big, peak_big = _traced(big, audit)
    assert plan_big.retained_files == plan_small.retained_files
    # The history is listed and decided, not skipped: no batch left in the logs names its folders,
    # so it is kept, every file of it (fail closed: what nothing names is never deleted).
    assert plan_big.kept["in_a_folder_no_batch_names"] >= n_big - n_small - plan_big.files
    assert peak_big <= 1.3 * peak_small, (peak_small, peak_big)


def test_a_live_querys_ssts_wait_for_the_oldest_retained_sst_of_every_partition(tmp_path) -> None:
    """The one rule that spans partitions: on a live query an unreferenced SST goes only when older
    than the oldest SST that any retained zip lists. Partition 1's orphans are older than its own
    retained SSTs but not than partition 0's: they stay, with their sidecars."""
    import os
    import shutil

    from tests.support.planning import candidates_of

    path = tmp_path / "ckpt"
    synthetic.build(path, 2, 60, window=10)
    stopped = candidates_of(plan_of(path))
    orphans = {c.path for c in stopped if c.reason == "unreferenced_sst" and c.path.endswith(".sst")}
    ssts = {p.relative_to(path).as_posix() for p in path.rglob("*.sst")}
    latest = max(int(p.name) for p in (path / "offsets").iterdir())
    shutil.copy(path / "offsets" / str(latest), path / "offsets" / str(latest + 1))  # a batch in flight
    now = time.time()
    for rel in ssts:  # partition 0's retained SSTs are the oldest of all; each orphan an hour older
        t = now - (10 if rel.split("/")[2] == "0" else 8) * 3600 - (3600 if rel in orphans else 0)
        os.utime(path / rel, (t, t))
    live = plan_of(path, now=now, workers=0)
    assert live.live
    planned = {c.path for c in candidates_of(live)}
    # Decided in worker processes, the held SSTs come back and are decided alike: the same manifest.
    in_workers = plan_of(path, now=now, workers=2)
    assert candidates_of(in_workers) == candidates_of(live)
    assert in_workers.summary() == live.summary()
    assert in_workers.partition_files == live.partition_files
    in_zero = {r for r in orphans if r.split("/")[2] == "0"}
    assert in_zero and orphans - in_zero
    assert {p for p in planned if p.endswith(".sst")} == in_zero
    assert {p for p in planned if p.endswith(".sst.crc")} == {
        f"{r.rsplit('/', 1)[0]}/.{r.rsplit('/', 1)[1]}.crc" for r in in_zero
    }
    assert live.kept["live_query_sst_newer_than_retained"] >= len(orphans - in_zero)


def test_a_partition_that_fails_in_a_worker_process_fails_the_plan_as_in_this_one(tmp_path) -> None:
    """A retained zip that cannot be read stops the plan (fail closed), whether its partition was
    decided here or in a worker process: the same error class and text, and no manifest."""
    from checkpoint.errors import GcError

    path = tmp_path / "ckpt"
    synthetic.build(path, 3, 40, window=10)
    for zip_file in (path / "state" / "0" / "1").rglob("*.zip"):
        zip_file.write_bytes(b"PK\x03\x04 cut short")
    audit = AuditTrail(str(tmp_path / "audit"))
    errors = []
    for workers in (0, 2):
        try:
            plan_of(path, audit, now=time.time(), workers=workers)
        except GcError as exc:
            errors.append(str(exc))
    assert len(errors) == 2 and errors[0] == errors[1], errors
    assert "retained zip state/0/1/" in errors[0]
    assert not list((tmp_path / "audit").rglob("*.jsonl"))


def _peak_rss(*args: str) -> tuple[int, int]:
    """(peak RSS in bytes of the command and the processes it waited for, bytes it printed)."""
    import os
    import subprocess
    import tempfile

    ckpt = CKPT
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen([ckpt, *args], stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        return usage.ru_maxrss * 1024, out.tell()


@pytest.mark.stress
def test_gc_json_costs_what_the_text_costs_however_many_candidates(tmp_path) -> None:
    """The reproduction: `--json` built one document of every candidate (712 MB against 50 MB at
    541,602 files). It now gives the totals and the manifest's path, within 1.3x of the text's
    peak; `--candidates` streams them, a chunk at a time."""
    path = tmp_path / "ckpt"
    # 47,562 files: the document of every candidate would be some 60 MB above the text's peak.
    files = synthetic.build(path, 60, 120, window=WINDOW)
    everything = ["gc", str(path), "--grace", "0s", "--unsafe-short-grace", "--quiet-period", "0s",
                  "--unsafe-short-quiet-period",
                  "--query-stopped"]  # fmt: skip
    text, _ = _peak_rss(*everything)
    as_json, _ = _peak_rss(*everything, "--json")
    streamed, printed = _peak_rss(*everything, "--candidates")
    assert files > 45_000 and printed > 3_000_000  # many candidates, all of them printed
    assert as_json <= 1.3 * text and streamed <= 1.3 * text, (text, as_json, streamed)
    # The apply keeps running totals and the first failures, not an outcome per file: every
    # outcome is in the audit trail's outcomes file, appended as it happens.
    applied, _ = _peak_rss(*everything, "--apply", "--json")
    assert applied <= 1.3 * text, (text, applied)
