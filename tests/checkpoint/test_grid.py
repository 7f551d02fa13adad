"""Every action over every state format Spark writes and every backend: {HDFS, RocksDB V1, RocksDB
V2} x {local, S3, Azure, GCS}. A format is one line of `FORMATS` (a real query's checkpoint in it), a backend
one line of `BACKENDS`: both get every test here from that line.

What each action does in a format is asked of the format (`checkpoint.format.states`); here the
doors are driven on real checkpoints and the outcome held against what recovery reads: a read
(the local copy's answers, with no recursive listing), a fork, a cleanup, a compaction and a
retirement in every cell; a migration, a repartition and a purge of expired state in each cell
whose format allows them (`allowing`; the purge on a query that keeps TTL state, `EXPIRING`), and
each refusal where it does not. Restarts under Spark are in each action's own tests (one format
and backend each proves a writer; the grid proves the rest reads, keeps and refuses alike).

The tests that only read a cell's checkpoint (its reading, a fork, the refusals, a migration) share
one copy of it (`kept`); the fork, the refusals and the migration say they left it as it was (by
names and sizes). The others get a copy each (`cell`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from checkpoint.analysis import Severity, validate
from checkpoint.cleanup import CleanupOptions, apply_cleanup
from checkpoint.compaction import CompactionOptions, CompactionPlanOptions, compact_checkpoints
from checkpoint.errors import MigrationRefused, NotACheckpointError, RepartitionRefused, SparkCannotReach
from checkpoint.expiry import PurgeOptions, expired_report, purge_expired
from checkpoint.fork import fork_checkpoint
from checkpoint.format import StateAction
from checkpoint.migrate import MigrationOptions, MigrationPorts, migrate_checkpoint
from checkpoint.model import Checkpoint, checkpoint_lineage, load_head
from checkpoint.repartition import RepartitionOptions, repartition_checkpoint
from checkpoint.retire import (
    RetirementPlanOptions,
    RetireOptions,
    apply_retirement,
    plan_retirement,
    read_retirement,
    retirement_request,
)
from checkpoint.safety import AuditTrail, EachInPlace, InPlace, TwoSided, taken_at_once
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint, hadoop_checksum, upload_checkpoint
from tests.support.planning import LATER, candidates_of, plan_of

R, M, P = StateAction.REPARTITION, StateAction.MIGRATE, StateAction.PURGE
# The format's name as reports give it -> a stopped query's checkpoint in it, from the corpora, and
# the actions of the three below that the format refuses (docs/architecture.md's table).
FORMATS = {
    "hdfs V1": ("hdfs_agg", {R, P}),
    "rocksdb V1": ("rocksdb_v1_changelog", set()),
    "rocksdb V2": ("two_actions", {M}),
}
BACKENDS = ("local", "s3", "azure", "gcs")
# The server a cell on an object store reaches when it is set up: its test tier's mark.
_TIER = {"s3": pytest.mark.s3, "azure": pytest.mark.cloud, "gcs": pytest.mark.cloud}
# Where the tests' Spark has a Hadoop file system: s3a's jars are installed; Azure's and GCS's
# connectors (hadoop-azure, gcs-connector) are in no registry this project installs from
# (docs/storage.md). A migration and a
# repartition read and write the state through Spark: elsewhere they refuse before writing.
SPARK_REACHES = {"local", "s3"}
_HADOOP = {"azure": "abfss", "gcs": "gs"}  # the scheme Spark is asked for where it reaches no store
# A query whose TTLs expired (the operator corpus's `expiring`), in each format that keeps TTL state.
EXPIRING = {"rocksdb V1": "expiring_v1", "rocksdb V2": "expiring"}


@dataclass
class Cell:
    format: str
    backend: str
    storage: Storage
    place: Callable[[str], Storage]  # a new place beside it, on its backend

    def head(self) -> Checkpoint:
        return load_head(self.storage, strict=False)


def _cells(allowing: StateAction | None = None) -> list:
    """Every cell, or those whose format allows `allowing`: a test's parametrization of `cell`. A
    cell on an object store reaches the server when it is set up, so its tier is marked here
    (`tests/conftest.py` tells the others from the fixtures a test names)."""
    return [
        pytest.param((f, b), id=f"{f}-{b}", marks=[_TIER[b]] if b in _TIER else [])
        for f in FORMATS
        for b in BACKENDS
        if allowing is None or allowing not in FORMATS[f][1]
    ]


@dataclass
class Shared:
    """The copies that serve the module's readers: {(format, backend): where}, and the local ones'
    folder."""

    folder: Path
    at: dict[tuple[str, str], str]


def _placed(
    request, fmt: str, backend: str, local: Path, tmp_path: Path, shared: Shared | None = None
) -> Cell:
    """A copy of the checkpoint at `local` on `backend`, and places beside it there. With `shared`,
    one copy serves every test that asks for it in that cell."""
    name = local.name if local.name != "checkpoint" else local.parent.name
    if backend == "local":
        here = str((shared.folder / fmt.replace(" ", "_") if shared else tmp_path) / name)
        if shared is None or (fmt, backend) not in shared.at:
            copy_checkpoint(local, Path(here))
            if shared is not None:
                shared.at[fmt, backend] = here
        return Cell(fmt, backend, Storage(here), lambda n: Storage(str(tmp_path / n)))
    server, proxy, bucket = request.getfixturevalue(backend)
    # Credentials in the options, not only in the environment: a compaction's Spark tasks get them
    # with the pickled filesystem, as a deployment's executors get theirs from their own setup.
    options = server.storage_options(proxy.endpoint)
    scheme = {"s3": "s3", "azure": "az", "gcs": "gs"}[backend]
    prefix = f"{scheme}://{bucket}/grid-{uuid.uuid4().hex[:8]}"
    if shared is None or (fmt, backend) not in shared.at:
        # Its schema paths as Spark's connector for the store spells them (s3a://, abfss://, gs://)
        spark_url = Storage(f"{prefix}/{name}", options).spark_url
        upload_checkpoint(
            server.filesystem(), local, f"{prefix[len(scheme) + 3 :]}/{name}", scheme, spark_url
        )
        if shared is not None:
            shared.at[fmt, backend] = f"{prefix}/{name}"
    here = shared.at[fmt, backend] if shared is not None else f"{prefix}/{name}"
    return Cell(fmt, backend, Storage(here, options), lambda n: Storage(f"{prefix}/{n}", options))


@pytest.fixture(params=_cells())
def cell(request, corpus, defaults, tmp_path) -> Cell:
    fmt, backend = request.param
    return _placed(request, fmt, backend, _corpus_copy(fmt, corpus, defaults), tmp_path)


@pytest.fixture(scope="module")
def _shared(tmp_path_factory) -> Shared:
    return Shared(tmp_path_factory.mktemp("grid-kept"), {})


@pytest.fixture(params=_cells())
def kept(request, corpus, defaults, tmp_path, _shared: Shared) -> Cell:
    """`cell` for a test that only reads the checkpoint: one copy in each cell serves all such
    tests of the module (an upload is most of a cell's set-up), and each test's places beside it
    are its own."""
    fmt, backend = request.param
    return _placed(request, fmt, backend, _corpus_copy(fmt, corpus, defaults), tmp_path, _shared)


def _corpus_copy(fmt: str, corpus, defaults) -> Path:
    name = FORMATS[fmt][0]
    return corpus[name] if name in corpus else defaults[name]


@pytest.fixture
def expiring(request, operators, tmp_path) -> Cell:
    """The query whose TTLs expired (the operator corpus's), in the cell's format: `cell`'s twin for
    the purge, which only a query keeping TTL state gives something to do."""
    fmt, backend = request.param
    return _placed(request, fmt, backend, operators / EXPIRING[fmt] / "checkpoint", tmp_path)


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


def test_its_format_is_told_and_it_reads_as_its_local_copy(kept: Cell, corpus, defaults) -> None:
    """Healthy, read head-first: the root, both logs, `state/`, the operators' metadata, their
    partition folders and one partition's store folders (checked against what the metadata
    declares), `sources/` and its file source's log, then each store's folder where recovery lists
    it (format V1); never a recursive listing. Its lineage and findings are its local copy's."""
    ckpt = kept.head()
    assert ckpt.states.name == kept.format
    assert _errors(ckpt) == []
    read = _recovery(ckpt)
    assert read, "no store found as its recovery finds them"
    calls = kept.storage.calls.snapshot()
    stores = len({e.store for e in checkpoint_lineage(ckpt)})
    assert calls["list"] == 0 and calls["list_dir"] <= 9 + stores, calls
    local = load_head(Storage(str(_corpus_copy(kept.format, corpus, defaults))), strict=False)
    assert read == _recovery(local)
    assert [(f.code, f.severity) for f in validate(ckpt).findings] == [
        (f.code, f.severity) for f in validate(local).findings
    ]


def test_a_fork_holds_what_recovery_reads_and_reads_as_healthy(kept: Cell) -> None:
    before = _tree(kept.storage)
    dest = kept.place("fork")
    result = fork_checkpoint(TwoSided(kept.storage, dest, taken_at_once("tests")))
    forked = load_head(dest, strict=False)
    assert result.batch == kept.head().latest_committed_batch
    assert forked.states.name == kept.format and _errors(forked) == []
    assert _recovery(forked) == _recovery(kept.head())
    # Within one object store, every file the fork did not have to rewrite is copied by the store.
    assert (result.server_side_files > 0) == (kept.backend != "local")
    assert _tree(kept.storage) == before


def test_cleanup_deletes_only_what_recovery_never_reads(cell: Cell, tmp_path: Path, corpus, defaults) -> None:
    """The plan is the local copy's; its apply deletes it all and keeps what recovery reads."""
    audit = AuditTrail(str(tmp_path / "audit"))
    before = cell.head()
    read = _recovery(before)
    # Two batches retained: what the older ones alone read goes, in every format.
    now = time.time() + LATER
    plan = plan_of(cell.storage, audit, now=now, retain_batches=2)
    local = plan_of(_corpus_copy(cell.format, corpus, defaults), now=now, retain_batches=2)
    # An object store has none of Hadoop's hidden checksums (`testbed.copying.upload_checkpoint`)
    hidden = cell.backend != "local"
    wanted = [c.path for c in candidates_of(local) if not (hidden and hadoop_checksum(c.path))]
    assert sorted(c.path for c in candidates_of(plan, audit)) == sorted(wanted)
    options = CleanupOptions(lambda: plan, planned=plan, what="gc")
    cleaned = apply_cleanup(InPlace(cell.storage, taken_at_once("tests"), audit), options)
    after = cell.head()
    left = set(_tree(cell.storage))
    assert read <= left and _recovery(after) == read and _errors(after) == []
    assert cleaned.result.deleted.files == plan.files > 0


def test_compaction_leaves_every_chain_at_its_new_snapshot(ports, cell: Cell) -> None:
    """Every store with a chain gets the snapshot of its committed version (written by Spark's
    provider for the HDFS-backed store, rebuilt here for RocksDB), read back under the lease: no
    chain is left, and the checkpoint reads as healthy."""

    rebuild = ports.compaction
    options = CompactionOptions(
        rebuild, CompactionPlanOptions(min_chain=1, quiet_seconds=0), strict=True, go_on=False
    )
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


def test_what_the_format_refuses_is_refused_with_nothing_written(kept: Cell, tmp_path: Path) -> None:
    """Repartition, migration and the purge of expired state, each through its door: a format
    that refuses one (`StateFormat.refusal`) is refused, or has nothing to purge, with the tree
    unchanged and no destination written."""
    states = kept.head().states
    audit = AuditTrail(str(tmp_path / "audit"))
    before = _tree(kept.storage)
    request = InPlace(kept.storage, taken_at_once("tests"), audit)
    refused = {a for a in (R, M, P) if states.refusal(a)}
    assert refused == FORMATS[kept.format][1]
    if R in refused:
        with pytest.raises(RepartitionRefused):
            repartition_checkpoint(request, RepartitionOptions(4, engine=_NoSpark(), quiet_seconds=0))
    if M in refused:
        dest = kept.place("migrated")
        with pytest.raises(MigrationRefused):
            request2 = TwoSided(kept.storage, dest, taken_at_once("tests"), audit)
            migrate_checkpoint(request2, MigrationOptions(MigrationPorts(_NoSpark(), _NoSpark())))
        assert _tree(dest) == {}
    # None of these queries keeps TTL state: the purge finds no store, whatever the format says.
    assert purge_expired(request, PurgeOptions(quiet_seconds=0)).stores == ()
    assert _tree(kept.storage) == before


def test_a_retirement_archives_what_recovery_reads_and_leaves_nothing(cell: Cell, tmp_path: Path) -> None:
    """Planned nine days on (a copy is new to its backend), applied past the grace, to an archive
    beside it: the archive reads as healthy in the same format with recovery's files, and nothing
    is left of the checkpoint."""
    read = _recovery(cell.head())
    archive, trail = cell.place("archive"), AuditTrail(str(tmp_path / "audit"))
    later = time.time() + 9 * 86400
    request = retirement_request(cell.storage, archive, taken_at_once("tests"), trail)
    plan = plan_retirement(request, RetirementPlanOptions(now=later))
    _, proven = read_retirement(plan.manifest)
    retired = apply_retirement(request, RetireOptions(proven, later + 8 * 86400))
    assert retired.deleted_files == plan.files > 0 and _tree(cell.storage) == {}
    kept = load_head(archive, strict=False)
    assert kept.states.name == cell.format and _errors(kept) == [] and _recovery(kept) == read


@pytest.mark.parametrize("kept", _cells(allowing=M), indirect=True)
def test_a_migration_to_v2_holds_the_source_state_and_reads_as_healthy(
    ports, kept: Cell, tmp_path: Path
) -> None:
    """Through Spark's tasks and reader (`jobs.migrate`), beside the source on its backend: every
    store's rows and digest proven equal by Spark's reader on both sides, the destination told as
    RocksDB V2 with the source's stores, healthy; the source unchanged."""

    source = kept.head()
    before = _tree(kept.storage)
    dest = kept.place("migrated")
    options = MigrationOptions(ports.migration, quiet_seconds=0)
    request = TwoSided(kept.storage, dest, taken_at_once("tests"), AuditTrail(str(tmp_path / "audit")))
    if kept.backend not in SPARK_REACHES:
        with pytest.raises(SparkCannotReach, match=f"no Hadoop file system for {_HADOOP[kept.backend]}://"):
            migrate_checkpoint(request, options)
        assert _tree(dest) == {} and _tree(kept.storage) == before
        return
    result = migrate_checkpoint(request, options)
    assert result.source_state == kept.format and result.proven
    migrated = load_head(dest, strict=False)
    assert migrated.states.name == "rocksdb V2" and _errors(migrated) == []
    assert _stores(migrated) == _stores(source) and len(result.stores) == len(_stores(source))
    assert _tree(kept.storage) == before


@pytest.mark.parametrize("cell", _cells(allowing=R), indirect=True)
def test_a_repartition_keeps_every_row_and_reads_as_healthy(ports, cell: Cell, tmp_path: Path) -> None:
    """Through Spark's repartitioner (`jobs.repartition`): every store's digest the same at twice
    its partitions, and the checkpoint, in its format, healthy."""

    before = cell.head()
    partitions = 2 * len({e.store.partition for e in checkpoint_lineage(before)})
    options = RepartitionOptions(partitions, ports.repartition, quiet_seconds=0)
    request = InPlace(cell.storage, taken_at_once("tests"), AuditTrail(str(tmp_path / "audit")))
    if cell.backend not in SPARK_REACHES:
        untouched = _tree(cell.storage)
        with pytest.raises(SparkCannotReach, match=f"no Hadoop file system for {_HADOOP[cell.backend]}://"):
            repartition_checkpoint(request, options)
        assert _tree(cell.storage) == untouched and not (tmp_path / "audit").exists()
        return
    done = repartition_checkpoint(request, options)
    assert done.to_partitions == partitions == 2 * done.from_partitions
    assert done.stores and all(s.digest_after == s.digest_before and s.rows > 0 for s in done.stores)
    after = cell.head()
    assert after.states.name == cell.format and _errors(after) == []
    assert {e.store.partition for e in checkpoint_lineage(after)} == set(range(partitions))


def _stores(ckpt: Checkpoint) -> set[tuple[int, int, str]]:
    return {(e.store.operator, e.store.partition, e.store.store) for e in checkpoint_lineage(ckpt)}


@pytest.mark.parametrize("expiring", _cells(allowing=P), indirect=True)
def test_a_purge_drops_what_expired_and_nothing_else(expiring: Cell, tmp_path: Path) -> None:
    """What the report counts as expired is what the purge drops, store by store (each gets a
    snapshot without it); a report after it finds nothing expired and every other entry still
    there, and the checkpoint, in its format, reads as healthy."""
    as_of = time.time()
    report = expired_report(expiring.storage, PurgeOptions(as_of=as_of)).as_dict()
    assert report["expired"] > 0
    options = PurgeOptions(as_of=as_of, quiet_seconds=0)
    request = InPlace(expiring.storage, taken_at_once("tests"), AuditTrail(str(tmp_path / "audit")))
    done = purge_expired(request, options).as_dict()
    assert {s["outcome"] for s in done["stores"]} == {"purged"} and done["expired"] == report["expired"]
    after = expired_report(expiring.storage, PurgeOptions(as_of=as_of)).as_dict()
    assert after["expired"] == 0 and after["entries"] == report["entries"] - report["expired"]
    ckpt = expiring.head()
    assert ckpt.states.name == expiring.format and _errors(ckpt) == []
