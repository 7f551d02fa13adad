"""`ckpt fork`: a new checkpoint holding what recovery at a committed batch reads, and nothing else.

Proof by the real queries: a fork at an earlier batch, with its source deleted, restarts, replays the
batches after the fork point and ends in the state of an untouched copy that processed the same
input (Spark's state data source, every store).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpoint.crash import CRASH_ENV
from checkpoint.errors import ForkIncomplete, ForkRefused
from checkpoint.fork.plan import rewrite_schema_paths
from checkpoint.format.layout import FORK_COMPLETE, FORK_STARTED
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from testbed.corpus import scenario_named
from testbed.recovery import recovery_files
from tests.support.cli import ckpt
from tests.support.forking import fork
from tests.support.leases import lapse_leases
from tests.support.paths import PROJECT
from tests.support.state import read_state, restart_like_untouched

MARKERS = {FORK_STARTED, FORK_COMPLETE}


def files_of(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


def ckpt_fork(audit: Path, *args: str) -> subprocess.CompletedProcess:
    """`ckpt fork`, with the `--audit` that scripts of earlier releases pass: still accepted, and
    ignored, since leases live beside each checkpoint."""
    return ckpt("fork", *args, "--audit", str(audit))


def run_fork(audit: Path, *args: str) -> dict:
    out = ckpt_fork(audit, *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


FORKED = {"snapshots": 6, "dedup_agg": 4, "join": 3, "join_cf": 3, "list_state": 3}


@pytest.mark.parametrize("name", sorted(FORKED))
def test_a_fork_at_an_earlier_batch_restarts_alone_like_the_original(
    spark, corpus, corpus_root, tmp_path, name
) -> None:
    batch = FORKED[name]
    src, untouched, dest = tmp_path / "src", tmp_path / "untouched", tmp_path / "dest"
    copy_checkpoint(corpus[name], src)
    copy_checkpoint(corpus[name], untouched)
    new_id = name == "join_cf"  # one fork with an id of its own
    doc = run_fork(
        tmp_path / "audit",
        str(src),
        str(dest),
        "--batch",
        str(batch),
        *(["--new-query-id"] if new_id else []),
    )

    expected = set(recovery_files(src, batch))
    assert files_of(dest) == expected | MARKERS  # exactly what recovery reads, nothing else
    assert (doc["files"], doc["batch"]) == (len(expected), batch)
    assert doc["bytes"] == sum((dest / rel).stat().st_size for rel in expected)
    source_id = load_checkpoint(str(src)).query_id
    assert (load_checkpoint(str(dest)).query_id != source_id) == new_id == (doc["query_id"] != source_id)
    for meta in dest.glob("state/*/_metadata/v2/*"):  # every schema path now names the fork
        assert str(src) not in meta.read_text() and f"file:{dest}/state/" in meta.read_text()
    assert ckpt("validate", str(dest)).returncode == 0
    assert read_state(spark, dest, batch, name) == read_state(spark, src, batch, name)

    shutil.rmtree(src)  # the fork needs nothing of its source
    scenario = scenario_named(name)
    final = restart_like_untouched(
        spark, scenario, corpus_root / name, dest, untouched, tmp_path / "more-input", max_files=1
    )
    assert final == scenario.batches  # the batches after the fork point, one by one, then the new one


@pytest.mark.parametrize(
    "name",
    ["long_chain", "watermark", "retention", "task_retry", "two_actions", "zstd", "killed_after_restart"],
)
def test_a_fork_holds_exactly_what_recovery_reads(corpus, tmp_path, name) -> None:
    src = copy_checkpoint(corpus[name], tmp_path / "src")  # a fork leases its source: never the corpus
    ckpt_ = load_checkpoint(str(src))
    for batch in sorted(
        {ckpt_.latest_committed_batch, max(b for b in ckpt_.batches if b <= 3 or name == "retention")}
    ):
        dest = tmp_path / f"at-{batch}"
        result = fork(Storage(str(src)), Storage(str(dest)), batch)
        assert files_of(dest) == recovery_files(src, batch).keys() | MARKERS, (name, batch)
        assert result.copied_files == result.files and result.resumed_files == 0
        assert load_checkpoint(str(dest)).latest_committed_batch == batch


def test_a_linked_fork_shares_the_state_files_and_outlives_its_source(spark, corpus, tmp_path) -> None:
    """`link=True` (the repartition backup beside the checkpoint): state and log files get a second
    name, the rewritten metadata is written; the fork reads alone once its source is gone."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    copy_checkpoint(corpus["snapshots"], src)
    batch = load_checkpoint(str(src)).latest_committed_batch
    expected = read_state(spark, src, batch, "snapshots")
    result = fork(Storage(str(src)), Storage(str(dest)), link=True)
    state = [rel for rel in recovery_files(src, batch) if rel.endswith((".zip", ".changelog", ".sst"))]
    assert state and all((dest / r).stat().st_ino == (src / r).stat().st_ino for r in state)
    assert result.linked_files >= len(state) and result.copied_files == result.files
    for meta in dest.glob("state/*/_metadata/v2/*"):  # rewritten to name the fork: its own inode
        assert meta.stat().st_nlink == 1 and str(src) not in meta.read_text()
    shutil.rmtree(src)
    assert ckpt("validate", str(dest)).returncode == 0
    assert read_state(spark, dest, batch, "snapshots") == expected


def test_a_link_the_file_system_refuses_is_a_copy(corpus, tmp_path, monkeypatch) -> None:
    import errno

    src, dest = copy_checkpoint(corpus["snapshots"], tmp_path / "src"), tmp_path / "dest"
    real_link = os.link
    refused: list[str] = []

    def refuse_between_roots(a: str, b: str, **how) -> None:
        if str(dest) in b and str(src) in a:
            refused.append(b)
            raise OSError(errno.EXDEV, "Invalid cross-device link", b)
        real_link(a, b, **how)  # write_if_absent's own temp-file link

    monkeypatch.setattr(os, "link", refuse_between_roots)
    result = fork(Storage(str(src)), Storage(str(dest)), link=True)
    assert refused and result.linked_files == 0 and result.copied_files == result.files
    assert all((dest / rel).stat().st_nlink == 1 for rel in files_of(dest))
    assert files_of(dest) == recovery_files(src, result.batch).keys() | MARKERS


def test_refusals_are_one_line_with_exit_2_and_write_nothing(corpus, copy_of, tmp_path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("someone's")
    damaged = copy_of("long_chain")
    chain = sorted((damaged / "state/0/0").glob("5_*.changelog"))[0]
    chain.unlink()
    # Spark's maintenance prunes on its own timer, so a fresh corpus may still hold batch 12's
    # state: the prune is done here, as Spark's retention would have done it.
    pruned = copy_of("retention")
    for gone in (pruned / "state").glob("*/*/13*"):
        gone.unlink()
    foreign = copy_of("snapshots")
    plain = copy_checkpoint(corpus["snapshots"], tmp_path / "plain")
    for offsets in (foreign / "offsets").glob("[0-9]*"):
        offsets.write_text(offsets.read_text().replace("RocksDBStateStoreProvider", "KvStoreProvider"))
    a_file = tmp_path / "notes.txt"
    a_file.write_text("someone's")
    # Links to nothing: what the fork makes (its lease first) would land where they point.
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere" / "deeper")
    (tmp_path / "via").symlink_to(tmp_path / "nolink")
    cases = {
        "not empty": ([str(plain), str(busy)], "the destination is not empty"),
        "a file": ([str(plain), str(a_file)], "the destination is a file, not a folder"),
        "unknown batch": ([str(plain), str(tmp_path / "a"), "--batch", "99"],
                          "batch 99 is not in the commit log (it holds batches 0-11)"),
        "pruned": ([str(pruned), str(tmp_path / "b"), "--batch", "12"],
                   "the state files of batch 12 are gone"),
        "a provider not Spark's": ([str(foreign), str(tmp_path / "c")], "UNKNOWN_PROVIDER"),
        "damaged": ([str(damaged), str(tmp_path / "d")], "REPLAY_CHAIN_BROKEN"),
        "inside the source": ([str(damaged), str(damaged / "fork")],
                              "the destination and the source overlap"),
        "a link to nothing": ([str(plain), str(tmp_path / "gone")], "gone: a link to"),
        "a link to nothing on the way": ([str(plain), str(tmp_path / "via" / "new")],
                                         f"{tmp_path / 'via'}, on its way, is a link to"),
    }  # fmt: skip
    for case, (args, message) in cases.items():
        # The overlap case keeps the default audit trail, beside DEST: inside SRC, so refused first.
        out = ckpt("fork", *args) if case == "inside the source" else ckpt_fork(tmp_path / "audit", *args)
        assert out.returncode == 2, (case, out.stdout, out.stderr)
        assert message in out.stderr and out.stderr.count("\n") == 1 and not out.stdout, (case, out.stderr)
    assert files_of(busy) == {"notes.txt"}
    assert not [p for p in tmp_path.iterdir() if p.name in ("a", "b", "c", "d", "nowhere", "nolink")]
    # A DEST that is not this fork's is refused before the leases: no record beside somebody's folder.
    trails = tmp_path / "_ckpt_audit"
    assert trails.is_dir() and not list(trails.glob("busy-*")) and not list(trails.glob("notes.txt-*")), (
        sorted(p.name for p in trails.iterdir())
    )
    assert a_file.read_text() == "someone's"


def test_a_rerun_of_a_complete_fork_copies_nothing(corpus, tmp_path) -> None:
    src, dest = str(copy_checkpoint(corpus["join"], tmp_path / "src")), tmp_path / "dest"
    first = run_fork(tmp_path / "audit", src, str(dest))
    again = run_fork(tmp_path / "audit", src, str(dest))
    assert again["already_complete"] and again["copied_files"] == 0 and again["files"] == first["files"]
    other = ckpt_fork(tmp_path / "audit", src, str(dest), "--new-query-id")
    assert other.returncode == 2 and "holds a fork of" in other.stderr
    # Killed between the query metadata and the completion marker: a checkpoint that validation flags.
    (dest / FORK_COMPLETE).unlink()
    validation = ckpt("validate", str(dest))
    assert validation.returncode == 1 and "INCOMPLETE_FORK" in validation.stdout
    again = run_fork(tmp_path / "audit", src, str(dest))
    assert again["resumed_files"] == again["files"] and again["copied_files"] == 0
    assert ckpt("validate", str(dest)).returncode == 0


def test_a_file_that_fails_its_sidecar_stops_the_fork_incomplete(copy_of, tmp_path) -> None:
    src = copy_of("long_chain")
    changelog = sorted((src / "state/0/1").glob("7_*.changelog"))[0]
    data = bytearray(changelog.read_bytes())
    data[-3] ^= 0xFF  # same size, other bytes: only the CRC32C can tell
    changelog.write_bytes(bytes(data))
    dest = tmp_path / "dest"
    out = ckpt_fork(tmp_path / "audit", str(src), str(dest))
    assert out.returncode == 1 and ".crc sidecar" in out.stderr and "run the same fork again" in out.stderr
    assert (dest / FORK_STARTED).exists() and not (dest / FORK_COMPLETE).exists()
    validation = ckpt("validate", str(dest), "--json")
    assert validation.returncode == 2 and "an interrupted fork" in validation.stderr
    with pytest.raises(ForkIncomplete):  # and again: damage never completes a fork
        fork(Storage(str(src)), Storage(str(dest)))


_SLOW_FORK = """
import sys, time
from checkpoint.storage import Storage
real = Storage.copy_to
def slow(self, *args, **kwargs):
    time.sleep(0.3)  # slow enough to be killed part-way
    return real(self, *args, **kwargs)
Storage.copy_to = slow
from cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_fork_killed_part_way_is_marked_incomplete_and_a_rerun_finishes_it(
    spark, corpus, corpus_root, tmp_path
) -> None:
    name = "snapshots"
    src, untouched, dest = tmp_path / "src", tmp_path / "untouched", tmp_path / "dest"
    copy_checkpoint(corpus[name], src)
    copy_checkpoint(corpus[name], untouched)
    args = ["fork", str(src), str(dest), "--batch", "7", "--workers", "1", "--lease-ttl", "10m"]
    child = subprocess.Popen([sys.executable, "-c", _SLOW_FORK, *args], cwd=PROJECT)
    deadline = time.monotonic() + 60
    while len(list(dest.rglob("*.sst"))) < 3:
        assert child.poll() is None and time.monotonic() < deadline, "the fork ended before it was killed"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    written = files_of(dest)
    assert FORK_STARTED in written and FORK_COMPLETE not in written and "metadata" not in written
    assert not [rel for rel in written if rel.startswith("commits/")]  # nothing a query would start from
    validation = ckpt("validate", str(dest))
    assert validation.returncode == 2 and "an interrupted fork, not a checkpoint yet" in validation.stderr
    # A copy killed mid-file leaves a temp file of this tool's naming: the re-run removes it.
    (dest / "state/0/0/.ckpt-maint-0.sst.0123abcd.tmp").write_bytes(b"partial")
    lapse_leases(src)
    out = ckpt(*args[:3], "--batch", "7", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["resumed_files"] >= 3 and doc["copied_files"] == doc["files"] - doc["resumed_files"]
    assert files_of(dest) == recovery_files(src, 7).keys() | MARKERS
    shutil.rmtree(src)
    restart_like_untouched(
        spark, scenario_named(name), corpus_root / name, dest, untouched, tmp_path / "more", max_files=1
    )


def test_schema_paths_move_and_anything_else_is_refused() -> None:
    raw = (
        b'v2\n{"operatorInfo":{"operatorId":0,"operatorName":"x"},"stateStoreInfo":[{"storeName":"default",'
        b'"numColsPrefixKey":0,"numPartitions":2,"stateSchemaFilePaths":["file:/old/ck/state/0/_stateSchema/'
        b'default/0_a8e166eb-7ac5-448d-8ff4-b59e471f1086"]}],"operatorPropertiesJson":"{}"}'
    )
    moved = rewrite_schema_paths(raw, "s3a://bucket/new", "meta")
    assert b"file:/old/ck" not in moved and b'"s3a://bucket/new/state/0/_stateSchema/default/0_' in moved
    assert moved.replace(b"s3a://bucket/new", b"file:/old/ck") == raw  # nothing else changed
    elsewhere = raw.replace(b"file:/old/ck/state/0/_stateSchema", b"file:/elsewhere/schemas")
    with pytest.raises(ForkRefused, match="names a schema outside the checkpoint"):
        rewrite_schema_paths(elsewhere, "s3a://bucket/new", "meta")


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_a_fork_killed_after_any_step_is_refused_until_a_rerun_finishes_it(corpus, tmp_path, step) -> None:
    """Killed once the files of a step are written: every byte of the state was checked before the
    first log file that Spark would start from, and the re-run finishes the fork."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    copy_checkpoint(corpus["snapshots"], src)
    args = ["fork", str(src), str(dest), "--lease-ttl", "10m"]
    died = ckpt(*args, env={CRASH_ENV: f"fork.after_step:{step}"})
    assert died.returncode == -signal.SIGKILL
    written = files_of(dest)
    assert FORK_STARTED in written and FORK_COMPLETE not in written
    assert ("metadata" in written) == (step == 3)
    validation = ckpt("validate", str(dest))
    assert validation.returncode != 0  # an interrupted fork (exit 2) or INCOMPLETE_FORK (exit 1)
    assert "interrupted fork" in validation.stderr or "INCOMPLETE_FORK" in validation.stdout
    lapse_leases(src)
    done = ckpt("fork", *args[1:3], "--json")
    assert done.returncode == 0, done.stderr
    latest = load_checkpoint(str(src)).latest_committed_batch
    assert files_of(dest) == recovery_files(src, latest).keys() | MARKERS
    assert ckpt("validate", str(dest)).returncode == 0


def test_bytes_kept_from_a_killed_run_are_checked_before_any_log_is_written(corpus, tmp_path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    copy_checkpoint(corpus["long_chain"], src)
    args = ["fork", str(src), str(dest), "--lease-ttl", "10m"]
    assert ckpt(*args, env={CRASH_ENV: "fork.after_step:0"}).returncode == -9
    kept = sorted((dest / "state/0/1").glob("*.changelog"))[-1]
    data = bytearray(kept.read_bytes())
    data[-3] ^= 0xFF  # same size: only its CRC32C tells, and the re-run did not copy it
    kept.write_bytes(bytes(data))
    lapse_leases(src)
    again = ckpt("fork", *args[1:3])
    assert again.returncode == 1 and ".crc sidecar" in again.stderr
    assert not (dest / "offsets").exists() and not (dest / "commits").exists()


def test_a_rerun_spelled_differently_is_the_same_fork(corpus, tmp_path) -> None:
    """Relative paths are made absolute at the door: the marker names the source in its one spelling."""
    src = tmp_path / "work" / "src"
    copy_checkpoint(corpus["join"], src)
    first = ckpt("fork", "src", "dest", "--json", cwd=src.parent)
    assert first.returncode == 0, first.stderr
    assert json.loads((src.parent / "dest" / FORK_STARTED).read_text())["source"] == str(src)
    for source, dest in ((f"file://{src}", str(src.parent / "dest")), (f"{src}/", f"{src.parent}//dest/")):
        again = run_fork(tmp_path / "audit", source, dest)
        assert again["already_complete"] and again["copied_files"] == 0


def test_a_moved_checkpoint_is_caught_and_a_fork_repairs_it(spark, corpus, corpus_root, tmp_path) -> None:
    """transformWithState names its schema files by absolute path: after a plain `mv`, Spark cannot
    restart. Validation says so and names the remedy; compaction and cleanup refuse; a fork to the
    new place restarts like an untouched copy."""
    name = "list_state"
    original, untouched = tmp_path / "original", tmp_path / "untouched"
    copy_checkpoint(corpus[name], original)  # names its own schema files, as if written there
    copy_checkpoint(corpus[name], untouched)
    assert ckpt("validate", str(original)).returncode == 0
    moved = tmp_path / "moved"
    original.rename(moved)  # what `mv` does
    validation = ckpt("validate", str(moved), "--json")
    assert validation.returncode == 1
    moved_findings = [f for f in json.loads(validation.stdout)["findings"] if f["code"] == "MOVED_CHECKPOINT"]
    assert moved_findings and f"ckpt fork {moved} NEW" in moved_findings[0]["message"]
    assert str(original) in moved_findings[0]["message"]
    assert ckpt("compact", str(moved)).returncode == 2
    assert ckpt("gc", str(moved)).returncode == 2
    fleet = ckpt("fleet", str(moved), "--no-cleanup-plan")
    assert (
        fleet.returncode == 1
        and "MOVED_CHECKPOINT" in fleet.stdout
        and f"ckpt fork {moved} NEW" in fleet.stdout
    )
    repaired = tmp_path / "repaired"
    doc = run_fork(tmp_path / "audit", str(moved), str(repaired))
    assert doc["files"] > 0 and ckpt("validate", str(repaired)).returncode == 0
    shutil.rmtree(moved)
    restart_like_untouched(
        spark, scenario_named(name), corpus_root / name, repaired, untouched, tmp_path / "more"
    )
