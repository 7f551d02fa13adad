"""Compaction's one flow (`checkpoint.compaction.compact_checkpoints`), which the CLI and the Dagster
asset translate into: leases before the head read, a backfill going on past the checkpoints it cannot
compact, each store's check its own checkpoint's lease, and the rebuild injected (here a recorder: the
Spark job's own tests are in test_compaction)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from checkpoint.compaction import CompactionOptions, CompactionPlanOptions, compact_checkpoints
from checkpoint.compaction.targets import Skip
from checkpoint.errors import CompactionDeferred, LeaseHeld, LeaseLost
from checkpoint.safety import EachInPlace, InPlace, Lease, lease_for, taken_at_once
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint

# Every store of the corpus's checkpoints is planned; a quiet period this long makes any query live.
PLAN_ALL, LIVE = (
    CompactionPlanOptions(min_chain=1, quiet_seconds=0),
    CompactionPlanOptions(min_chain=1, quiet_seconds=10**9),
)


class Recorder:
    """The injected rebuild: records the tasks and runs each store's check as Spark's job would."""

    def __init__(self) -> None:
        self.tasks: list = []
        self.lose: list[Lease] = []  # leases given back before the stores run

    def __call__(self, tasks, check):
        self.tasks += tasks
        outcomes = []
        for lease in self.lose:
            lease.release()  # as a takeover would leave it, once the plan is done
        for ckpt, entry in tasks:
            try:
                check(ckpt)
                outcomes.append((Path(ckpt.url).name, entry.store, "ok"))
            except LeaseLost:
                outcomes.append((Path(ckpt.url).name, entry.store, "lost"))
        return outcomes


def _door(root: Path, kept: list[Lease] | None = None):
    take = taken_at_once("tests")

    def taking(storage: Storage, what: str):
        lease = take(storage, what)
        if kept is not None:
            kept.append(lease)
        return lease

    return lambda name: InPlace(Storage(str(root / name)), taking)


def test_a_backfill_goes_on_past_what_it_cannot_compact_and_gives_every_lease_back(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    copy_checkpoint(corpus["long_chain"], tmp_path / "chain")
    copy_checkpoint(corpus["join"], tmp_path / "held")
    (tmp_path / "empty").mkdir()
    rebuild = Recorder()
    with lease_for(Storage(str(tmp_path / "held")), "someone else").acquire():
        done = compact_checkpoints(
            EachInPlace(["chain", "held", "empty", "../chain"], _door(tmp_path)),
            CompactionOptions(rebuild, strict=True, go_on=True, what="compaction", plan=PLAN_ALL),
        )
    assert [p.name for p in done.planned] == ["chain"]
    assert [r.name for r in done.refused] == ["held", "empty", "../chain"]
    assert "someone else" in done.refused[0].why
    tasks = done.planned[0].targets
    assert len(tasks) > 0 and len(rebuild.tasks) == len(tasks) == len(done.outcomes)
    assert {o[2] for o in done.outcomes} == {"ok"}
    # Each task carries its own store's files, not the checkpoint's.
    assert all(set(ckpt.stores) == {entry.store} for ckpt, entry in rebuild.tasks)
    for name in ("chain", "empty"):  # every lease given back, the refused checkpoints' too
        with lease_for(Storage(str(tmp_path / name)), "after").acquire():
            pass


def test_a_checkpoint_asked_for_by_name_raises_and_rebuilds_nothing(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    copy_checkpoint(corpus["long_chain"], tmp_path / "chain")
    rebuild = Recorder()
    with lease_for(Storage(str(tmp_path / "chain")), "someone else").acquire():
        with pytest.raises(LeaseHeld, match="someone else"):
            compact_checkpoints(
                EachInPlace(["chain"], _door(tmp_path)),
                CompactionOptions(rebuild, strict=False, go_on=False, what="compact", plan=PLAN_ALL),
            )
    assert rebuild.tasks == []


def test_a_running_format_v1_query_is_skipped_in_a_backfill_and_refused_by_name(
    defaults: dict[str, Path], tmp_path: Path
) -> None:
    copy_checkpoint(defaults["rocksdb_v1_changelog"], tmp_path / "v1")
    rebuild = Recorder()
    done = compact_checkpoints(
        EachInPlace(["v1"], _door(tmp_path)),
        CompactionOptions(rebuild, strict=True, go_on=True, what="compaction", plan=LIVE),
    )
    assert done.refused == () and rebuild.tasks == [] and done.outcomes == ()
    (skip,) = done.planned[0].skips
    assert "format V1" in skip.reason and "Nothing was written" in skip.reason
    with pytest.raises(CompactionDeferred, match="format V1"):
        compact_checkpoints(
            EachInPlace(["v1"], _door(tmp_path)),
            CompactionOptions(rebuild, strict=False, go_on=False, what="compact", plan=LIVE),
        )
    assert rebuild.tasks == []


def test_each_store_is_checked_against_its_own_checkpoints_lease(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    names = ["long_chain", "list_state"]
    for name in names:
        copy_checkpoint(corpus[name], tmp_path / name)
    kept: list[Lease] = []
    rebuild, door = Recorder(), _door(tmp_path, kept)

    def losing(tasks, check):
        rebuild.lose = [kept[0]]  # the first checkpoint's lease, lost after planning
        return rebuild(tasks, check)

    done = compact_checkpoints(
        EachInPlace(names, door),
        CompactionOptions(losing, strict=True, go_on=True, what="compaction", plan=PLAN_ALL),
    )
    by_checkpoint = {name: {o[2] for o in done.outcomes if o[0] == name} for name in names}
    assert by_checkpoint == {"long_chain": {"lost"}, "list_state": {"ok"}}


def test_a_runs_log_says_what_it_compacts_first_then_counts_the_checkpoints_planned(
    corpus: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy_checkpoint(corpus["long_chain"], tmp_path / "chain")
    (tmp_path / "empty").mkdir()
    with caplog.at_level(logging.INFO):
        compact_checkpoints(
            EachInPlace(["chain", "empty"], _door(tmp_path)),
            CompactionOptions(Recorder(), strict=True, go_on=True, what="compaction", plan=PLAN_ALL),
        )
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "compaction of 2 checkpoint(s): each read at its newest two batches and planned"
    planned = [line for line in lines if "checkpoint(s) planned" in line]
    assert planned[0] == "1 of 2 checkpoint(s) planned: chain, 4 store(s) to compact"
    assert planned[1].startswith("2 of 2 checkpoint(s) planned: empty, refused: ")
    progress = [r.__dict__["progress"] for r in caplog.records if "checkpoint(s) planned" in r.getMessage()]
    assert [(p.done, p.total) for p in progress] == [(1, 2), (2, 2)]


def test_a_long_planning_says_where_it_is_every_few_seconds_and_names_a_deferral(
    corpus: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import checkpoint.compaction.flow as flow

    names = [f"chain-{i}" for i in range(5)]
    for name in names:
        copy_checkpoint(corpus["long_chain"], tmp_path / name)
    now = iter(
        [0.0, 4.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0]
    )  # read for each checkpoint after the first, and as each line is said
    monkeypatch.setattr(flow, "clock", lambda: next(now))
    with caplog.at_level(logging.INFO):
        compact_checkpoints(
            EachInPlace(names, _door(tmp_path)),
            CompactionOptions(Recorder(), strict=True, go_on=True, what="compaction", plan=PLAN_ALL),
        )
    said = [r.getMessage() for r in caplog.records if "checkpoint(s) planned" in r.getMessage()]
    # the first; then none until 10 s have passed since it; then the last
    assert [line.split(" checkpoint")[0] for line in said] == ["1 of 5", "3 of 5", "5 of 5"]
    assert said[0].endswith("chain-0, 4 store(s) to compact")
    deferred = flow.Planned("q", None, (), (Skip(-1, -1, "*", "a running format V1 query"),))  # type: ignore[arg-type]
    assert flow._planned(deferred) == "deferred: a running format V1 query, compacted once stopped"
