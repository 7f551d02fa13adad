"""The head-first read path: what it reads equals what a full listing says, and costs no more on a
checkpoint with a longer history.

Correctness is proved on every real corpus checkpoint against the full-listing model; cost is
compared on two synthetic checkpoints (real naming) that differ only in older history.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.analysis.checks import ValidationOptions, validate
from checkpoint.analysis.fleet import fleet_row, look_at
from checkpoint.compaction.targets import CompactionPlanOptions, plan_compaction
from checkpoint.errors import CheckpointError
from checkpoint.model import Logs
from checkpoint.model.checkpoint import Scope, load_checkpoint
from checkpoint.model.discovery import find_checkpoints
from checkpoint.model.head import latest_commit, load_head
from checkpoint.model.lineage import checkpoint_lineage
from checkpoint.policy import POLICY
from checkpoint.storage import Storage
from testbed import synthetic
from testbed.copying import copy_checkpoint
from tests.support import damage

# Same versions modulo the snapshot interval: the same replay chains (5 changelogs) at the latest
# batch, 60 against 300 versions of history per store.
SMALL, BIG = 65, 305
PARTITIONS, WINDOW = 6, 20


def _findings(validation) -> list:
    return sorted(sorted(f.as_dict().items()) for f in validation.findings)


@pytest.mark.parametrize("deep", [False, True])
def test_head_first_equals_the_full_listing_on_every_corpus_checkpoint(corpus, deep) -> None:
    for name, path in corpus.items():
        full = load_checkpoint(str(path), strict=False)
        head = load_head(str(path), strict=False, sidecars=deep, recent=2)
        options = ValidationOptions(deep=deep)
        got, want = validate(head, options), validate(full, options)
        assert _findings(got) == _findings(want), name
        assert [e.as_dict() for e in got.lineage] == [e.as_dict() for e in want.lineage], name
        ours, theirs = (
            plan_compaction(c, CompactionPlanOptions(min_chain=2, quiet_seconds=0)) for c in (head, full)
        )
        assert [t.as_key() for t in ours.targets] == [t.as_key() for t in theirs.targets], name
        assert ours.skips == theirs.skips, name
        calls = head.storage.calls.snapshot()
        assert head.scope == Scope.RECOVERY and calls["list"] == 0, (name, calls)
        assert len(head.files) < len(full.files), name


def test_a_damaged_chain_reads_as_damage_head_first(copy_of) -> None:
    path = copy_of("long_chain")
    victim = sorted((path / "state" / "0" / "2").glob("20_*.changelog"))[0]
    victim.unlink()
    head = validate(load_head(str(path), strict=False))
    assert "REPLAY_CHAIN_BROKEN" in {f.code for f in head.findings}
    assert _findings(head) == _findings(validate(load_checkpoint(str(path), strict=False)))


def test_a_batch_that_was_not_read_is_refused_not_reported_as_missing(corpus) -> None:
    head = load_head(str(corpus["snapshots"]))
    older = head.latest_committed_batch - 3
    with pytest.raises(CheckpointError, match=f"state files of batch {older} were not read"):
        checkpoint_lineage(head, older)
    at = load_head(str(corpus["snapshots"]), batches=[older])
    assert [e.as_dict() for e in checkpoint_lineage(at, older)] == [
        e.as_dict() for e in checkpoint_lineage(load_checkpoint(str(corpus["snapshots"])), older)
    ]


def test_the_logs_a_restart_reads_give_what_every_log_gives_on_every_corpus_checkpoint(corpus) -> None:
    """`Logs.RECOVERY` reads the newest commit and the newest offsets, not every retained batch:
    the fleet's row, the lineage and the compaction plan are the same as from every log file."""
    fewer = 0
    for name, path in corpus.items():
        every, recovery = (load_head(str(path), strict=False, recent=2, logs=logs) for logs in Logs)
        assert fleet_row(name, recovery, now=1e10) == fleet_row(name, every, now=1e10), name
        for batch in sorted(b.id for b in recovery.batches.values() if b.committed):
            assert checkpoint_lineage(recovery, batch) == checkpoint_lineage(every, batch), name
        ours, theirs = (
            plan_compaction(c, CompactionPlanOptions(min_chain=2, quiet_seconds=0)) for c in (recovery, every)
        )
        assert ours == theirs, name
        assert recovery.files == every.files, name  # every log file listed, by name
        read = {n: c.storage.calls.snapshot()["read"] for n, c in (("recovery", recovery), ("every", every))}
        assert read["recovery"] <= read["every"], name
        fewer += read["recovery"] < read["every"]
    assert fewer >= len(corpus) // 2  # most corpus queries ran more batches than a restart reads


def test_a_look_reads_the_logs_a_restart_reads_whatever_the_retention(tmp_path) -> None:
    """Spark keeps a hundred batches of offsets and commits: a look reads the same few files from a
    checkpoint that retains 100 as from one that retains 4, and a validation reads them all."""
    cost = {}
    for retained in (4, 100):
        synthetic.build(tmp_path / str(retained), 2, 120, window=retained)
        for logs in Logs:
            storage = Storage(str(tmp_path / str(retained)))
            fleet_row("k", load_head(storage, strict=False, logs=logs))
            cost[retained, logs] = dict(storage.calls.snapshot())
    assert cost[4, Logs.RECOVERY] == cost[100, Logs.RECOVERY]
    assert cost[100, Logs.ALL]["read"] - cost[4, Logs.ALL]["read"] == 2 * (100 - 4)


def test_an_older_log_file_damaged_is_not_read_by_a_look_and_the_newest_is(copy_of) -> None:
    """A restart reads the newest commit, never an older one: a look finds damage where a restart
    would meet it, and leaves the older files to validation, which reads every one."""
    path = copy_of("snapshots")
    every = load_head(str(path), strict=False)
    latest = every.latest_committed_batch
    (path / "commits" / str(latest - 2)).write_bytes(b"v1\n{not json")

    def codes(logs: Logs) -> set[str]:
        return {f.code for f in validate(load_head(str(path), strict=False, logs=logs)).findings}

    assert "UNREADABLE_LOG_FILE" in codes(Logs.ALL) - codes(Logs.RECOVERY)
    (path / "commits" / str(latest)).write_bytes(b"v1\n{not json")
    assert "UNREADABLE_LOG_FILE" in codes(Logs.RECOVERY)
    with pytest.raises(CheckpointError):
        load_head(str(path), logs=Logs.RECOVERY)  # strict: refused, as Spark's restart fails there


def test_latest_commit_is_one_listing_of_the_commit_log(corpus) -> None:
    storage = Storage(str(corpus["snapshots"]))
    assert latest_commit(storage) == load_checkpoint(str(corpus["snapshots"])).latest_committed_batch
    assert storage.calls.snapshot() == {"list_dir": 1}


@pytest.fixture(scope="module")
def two_histories(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("histories")
    out = {}
    for name, versions in (("small", SMALL), ("big", BIG)):
        synthetic.build(root / name, PARTITIONS, versions, window=WINDOW)
        out[name] = root / name
    return out


def _cost(path: Path, work) -> dict:
    storage = Storage(str(path))
    work(storage)
    return dict(storage.calls.snapshot())


READS = {
    "lineage": lambda s: checkpoint_lineage(load_head(s)),
    "validate": lambda s: validate(load_head(s, strict=False)),
    "validate --deep": lambda s: validate(
        load_head(s, strict=False, sidecars=True), ValidationOptions(deep=True)
    ),
    "compaction plan": lambda s: plan_compaction(
        load_head(s, recent=2), CompactionPlanOptions(quiet_seconds=0)
    ),
    "idle tick": latest_commit,
}


@pytest.mark.parametrize("what", sorted(READS))
def test_reads_cost_the_same_whatever_the_history(two_histories, what) -> None:
    small, big = (_cost(two_histories[n], READS[what]) for n in ("small", "big"))
    assert small == big and sum(small.values()) > 0, what
    files = {n: sum(1 for p in two_histories[n].rglob("*") if p.is_file()) for n in two_histories}
    assert files["big"] > 4 * files["small"]  # the histories really differ


def test_the_synthetic_chains_are_what_the_comparison_assumes(two_histories) -> None:
    for path in two_histories.values():
        lineage = checkpoint_lineage(load_head(str(path)))
        assert len(lineage) == PARTITIONS and {e.chain_length for e in lineage} == {5}


def test_discovery_never_descends_into_a_checkpoint(corpus, tmp_path) -> None:
    root = tmp_path / "root"
    copy_checkpoint(corpus["snapshots"], root / "a" / "orders")
    copy_checkpoint(corpus["join"], root / "b" / "deep" / "clicks")
    (root / "b" / "notes").mkdir()
    storage = Storage(str(root))
    listed: list[str] = []
    original = storage.list_dir

    def spy(rel: str = ""):
        listed.append(rel)
        return original(rel)

    storage.list_dir = spy  # type: ignore[method-assign]
    found = find_checkpoints(storage)
    assert [f.rel for f in found] == ["a/orders", "b/deep/clicks"]
    assert sorted(listed) == ["", "a", "a/orders", "b", "b/deep", "b/deep/clicks", "b/notes"]
    assert storage.calls.snapshot() == {"list_dir": len(listed)}


def test_discovery_never_offers_the_audit_trail_s_own_copies(corpus, tmp_path) -> None:
    """A repartition's backup fork is a whole checkpoint kept in `_ckpt_audit`: a record, not a
    checkpoint to maintain (compacting or cleaning it would change the backup)."""
    root = tmp_path / "root"
    copy_checkpoint(corpus["snapshots"], root / "orders")
    backup = root / "_ckpt_audit" / "orders-1234" / "repartitions" / "r1" / "backup"
    copy_checkpoint(corpus["snapshots"], backup)
    assert [f.rel for f in find_checkpoints(Storage(str(root)))] == ["orders"]


def test_a_missing_root_is_an_error_not_an_empty_fleet(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="no such directory"):
        find_checkpoints(Storage(str(tmp_path / "gone")))


def test_the_per_partition_listing_equals_the_flat_one(corpus) -> None:
    for name in ("join", "dedup_agg", "list_state"):
        flat = load_checkpoint(str(corpus[name]))
        split = load_checkpoint(str(corpus[name]), listing="per_partition")
        assert [f.info for f in split.files] == [f.info for f in flat.files], name
        assert split.storage.calls.snapshot()["list"] >= 4  # one recursive listing per partition


def test_a_log_file_pruned_between_listing_and_read_is_read_again(copy_of, monkeypatch) -> None:
    """Spark's log retention deletes the oldest commit of a live query while it is being read: the
    logs are listed and read again, and the load sees the log as it now is."""
    path = copy_of("snapshots")
    real = Storage.read_many
    pruned = []

    def prune_once(self, rels, **bounds):
        rels = list(rels)
        if not pruned and "commits/0" in rels:
            (path / "commits" / "0").unlink()
            (path / "offsets" / "0").unlink()
            pruned.append(True)
        return real(self, rels, **bounds)

    monkeypatch.setattr(Storage, "read_many", prune_once)
    ckpt = load_head(str(path))
    assert pruned and 0 not in ckpt.batches and ckpt.latest_committed_batch is not None


def _look(path: Path) -> tuple[dict, set[str]]:
    """A fleet row's answer (`look_at`, which reads of the logs what a restart reads) and the
    codes of its findings."""
    row = look_at("k", str(path), None, POLICY, {})
    return row.as_dict(), {*row.errors, *row.warnings}


def test_a_look_tells_from_every_log_what_the_newest_batches_alone_cannot(corpus, tmp_path) -> None:
    """A repartition a few batches ago (the operator metadata keeps the first run's count, which
    only older batches have) and a damaged newest commit (the format would be guessed from no
    commit): the look reads every retained log then, and says what validation says."""
    widened, damaged = (copy_checkpoint(corpus["long_chain"], tmp_path / n) for n in ("widened", "damaged"))
    damage.widened_lately(widened)
    assert validate(load_head(str(widened), strict=False)).ok
    newest_only = validate(load_head(str(widened), strict=False, logs=Logs.RECOVERY))
    assert "STORES_DISAGREE" in {f.code for f in newest_only.findings}  # what the fallback is for
    row, codes = _look(widened)
    assert "STORES_DISAGREE" not in codes and row["state_format"] == "rocksdb V2"

    healthy = _look(damaged)[0]
    (damaged / "commits" / str(healthy["latest_committed_batch"])).write_bytes(b"garbage")
    guessed = fleet_row("k", load_head(str(damaged), strict=False, logs=Logs.RECOVERY))
    assert guessed.state_format != healthy["state_format"] == "rocksdb V2"  # what the fallback is for
    row, codes = _look(damaged)
    assert "UNREADABLE_LOG_FILE" in codes and row["state_format"] == healthy["state_format"]
    every = fleet_row("k", load_head(str(damaged), strict=False))
    assert {k: v for k, v in row.items() if k != "last_commit_age_seconds"} == {
        k: v for k, v in every.as_dict().items() if k != "last_commit_age_seconds"
    }
