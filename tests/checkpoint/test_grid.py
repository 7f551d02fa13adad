"""Every action over every state format Spark writes and every backend: {HDFS, RocksDB V1, RocksDB
V2} x {local, S3}. A format is one line of `FORMATS` (a real query's checkpoint in it), a backend
one line of `BACKENDS`: both get every test here from that line.

What each action does in a format is asked of the format (`checkpoint.format.states`); here the
doors are driven on real checkpoints and the outcome held against what recovery reads: a read, a
fork, a cleanup, a compaction, and the refusals. Restarts under Spark are in each action's own
tests (one format and backend each proves a writer; the grid proves the rest reads, keeps and
refuses alike)."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from checkpoint.analysis import Severity, validate
from checkpoint.cleanup import AuditTrail, CleanupOptions, apply_cleanup
from checkpoint.compaction import CompactionOptions, compact_checkpoints
from checkpoint.errors import MigrationRefused, NotACheckpointError, RepartitionRefused
from checkpoint.expiry import PurgeOptions, purge_expired
from checkpoint.fork import fork_checkpoint
from checkpoint.format import StateAction
from checkpoint.migrate import MigrationOptions, migrate_checkpoint
from checkpoint.model import Checkpoint, checkpoint_lineage, load_head
from checkpoint.repartition import RepartitionOptions, repartition_checkpoint
from checkpoint.safety import EachInPlace, InPlace, TwoSided, taken_at_once
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from tests.support.planning import plan_of

R, M, P = StateAction.REPARTITION, StateAction.MIGRATE, StateAction.PURGE
# The format's name as reports give it -> a stopped query's checkpoint in it, from the corpora, and
# the actions of the three below that the format refuses (docs/architecture.md's table).
FORMATS = {
    "hdfs V1": ("hdfs_agg", {R, P}),
    "rocksdb V1": ("rocksdb_v1_changelog", set()),
    "rocksdb V2": ("two_actions", {M}),
}
BACKENDS = ("local", "s3")
LATER = 7 * 3600  # planned "seven hours from now": every copied file is past the grace period


@dataclass
class Cell:
    format: str
    storage: Storage
    place: Callable[[str], Storage]  # a new place beside it, on its backend

    def head(self) -> Checkpoint:
        return load_head(self.storage, strict=False)


@pytest.fixture(params=[(f, b) for f in FORMATS for b in BACKENDS], ids=lambda p: f"{p[0]}-{p[1]}")
def cell(request, corpus, defaults, tmp_path) -> Cell:
    fmt, backend = request.param
    name = FORMATS[fmt][0]
    if backend == "local":
        copy_checkpoint(corpus[name] if name in corpus else defaults[name], tmp_path / name)
        return Cell(fmt, Storage(str(tmp_path / name)), lambda n: Storage(str(tmp_path / n)))
    server, proxy, bucket = request.getfixturevalue("s3")
    options = server.storage_options(proxy.endpoint)
    url = request.getfixturevalue("s3_copy_of")(name)
    prefix = url.rsplit("/", 1)[0]
    return Cell(
        fmt, Storage(url, options), lambda n: Storage(f"{prefix}/{n}-{uuid.uuid4().hex[:6]}", options)
    )


def _recovery(ckpt: Checkpoint) -> set[str]:
    """Every state file recovery at the latest batch reads, relative to the checkpoint."""
    out = set()
    for entry in checkpoint_lineage(ckpt):
        for f in (entry.base, entry.committed_file, *entry.chain):
            if f is not None:
                out.add(f.rel)
    return out


def _errors(ckpt: Checkpoint) -> list[str]:
    return [f"{f.code}: {f.message}" for f in validate(ckpt).findings if f.severity == Severity.ERROR]


def _tree(storage: Storage) -> dict[str, int]:
    try:
        return {f.rel: f.size for f in storage.list_files()}
    except NotACheckpointError:  # nothing there, not even its folder
        return {}


def test_its_format_is_told_and_it_reads_as_healthy(cell: Cell) -> None:
    ckpt = cell.head()
    assert ckpt.states.name == cell.format
    assert _errors(ckpt) == []
    assert _recovery(ckpt), "no store found as its recovery finds them"


def test_a_fork_holds_what_recovery_reads_and_reads_as_healthy(cell: Cell) -> None:
    dest = cell.place("fork")
    result = fork_checkpoint(TwoSided(cell.storage, dest, taken_at_once("tests")))
    forked = load_head(dest, strict=False)
    assert result.batch == cell.head().latest_committed_batch
    assert forked.states.name == cell.format and _errors(forked) == []
    assert _recovery(forked) == _recovery(cell.head())


def test_cleanup_deletes_only_what_recovery_never_reads(cell: Cell, tmp_path: Path) -> None:
    audit = AuditTrail(str(tmp_path / "audit"))
    before = cell.head()
    read = _recovery(before)
    # Two batches retained: what the older ones alone read goes, in every format.
    plan = plan_of(cell.storage, audit, now=time.time() + LATER, retain_batches=2)
    options = CleanupOptions(audit, lambda: plan, planned=plan, what="gc")
    cleaned = apply_cleanup(InPlace(cell.storage, taken_at_once("tests")), options)
    after = cell.head()
    left = set(_tree(cell.storage))
    assert read <= left and _recovery(after) == read and _errors(after) == []
    assert cleaned.result.deleted.files == plan.files > 0


def test_compaction_leaves_every_chain_at_its_new_snapshot(cell: Cell, spark) -> None:
    """Every store with a chain gets the snapshot of its committed version (written by Spark's
    provider for the HDFS-backed store, rebuilt here for RocksDB), read back under the lease: no
    chain is left, and the checkpoint reads as healthy."""
    from jobs.compact import run_compaction_tasks

    rebuild = functools.partial(run_compaction_tasks, spark)
    options = CompactionOptions(rebuild, min_chain=1, quiet_seconds=0, strict=True, go_on=False)
    done = compact_checkpoints(
        EachInPlace(["it"], lambda _: InPlace(cell.storage, taken_at_once("tests"))), options
    )
    assert done.outcomes and all(o.ok for o in done.outcomes), [o.error for o in done.outcomes]
    assert set(done.chains_after["it"].values()) == {0}
    assert _errors(cell.head()) == []


class _NoSpark:
    """What a door is handed for Spark: never called when the format refuses the action first."""

    def __call__(self, *args: object) -> object:
        raise AssertionError("Spark was asked for, after the format's gate")


def test_what_the_format_refuses_is_refused_with_nothing_written(cell: Cell, tmp_path: Path) -> None:
    """Repartition, migration and the purge of expired state, each through its door: a format
    that refuses one (`StateFormat.refusal`) is refused, or has nothing to purge, with the tree
    unchanged and no destination written."""
    states = cell.head().states
    audit = AuditTrail(str(tmp_path / "audit"))
    before = _tree(cell.storage)
    request = InPlace(cell.storage, taken_at_once("tests"))
    refused = {a for a in (R, M, P) if states.refusal(a)}
    assert refused == FORMATS[cell.format][1]
    if R in refused:
        with pytest.raises(RepartitionRefused):
            repartition_checkpoint(request, RepartitionOptions(audit, 4, engine=_NoSpark(), quiet_seconds=0))
    if M in refused:
        dest = cell.place("migrated")
        with pytest.raises(MigrationRefused):
            request2 = TwoSided(cell.storage, dest, taken_at_once("tests"))
            migrate_checkpoint(request2, MigrationOptions(audit, digests=_NoSpark(), writer=_NoSpark()))
        assert _tree(dest) == {}
    # None of these queries keeps TTL state: the purge finds no store, whatever the format says.
    assert purge_expired(request, PurgeOptions(audit, quiet_seconds=0)).stores == ()
    assert _tree(cell.storage) == before
