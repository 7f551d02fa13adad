"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`), cleaned: what recovery reads kept, the query restarted like an
untouched copy, the rules of each format."""

from __future__ import annotations

import pytest

from checkpoint.format.layout import classify
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import checkpoint_lineage
from tests.support.cli import ckpt
from tests.support.defaults import V1_SESSION, copy_default
from tests.support.planning import LATER, plan_later


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hdfs_agg", "hdfs_dedup", "rocksdb_v1", "rocksdb_v1_changelog"])
def test_cleanup_keeps_what_recovery_reads_and_the_query_restarts_like_untouched(
    ports, spark, defaults, tmp_path, name
) -> None:
    """What Spark's maintenance would have removed had the query kept running (and orphan SSTs)
    goes; the last two batches read the same state, and the restarted query ends in the state of
    an untouched copy restarted with the same input."""
    from checkpoint.safety import AuditTrail
    from testbed.defaults import scenario_named
    from tests.support.planning import apply_unleased
    from tests.support.state import read_state, restart_like_untouched

    cleaned, untouched = (
        copy_default(defaults, name, tmp_path / "cleaned"),
        copy_default(defaults, name, tmp_path / "kept"),
    )
    ckpt_ = load_checkpoint(str(cleaned))
    window = sorted(b.id for b in ckpt_.batches.values() if b.committed)[-2:]
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(cleaned, audit=audit, retain_batches=2)
    with ports.confs(V1_SESSION):
        before = {b: read_state(spark, cleaned, b, name) for b in window}
        result = apply_unleased(plan, ckpt_.storage, audit)
        assert plan.files > 0 and not result.failed.files and result.deleted.files == plan.files
        assert {b: read_state(spark, cleaned, b, name) for b in window} == before
        assert plan_later(cleaned, retain_batches=2).files == 0  # a second run plans nothing
        assert ckpt("validate", str(cleaned)).returncode == 0
        final = restart_like_untouched(
            spark, scenario_named(name), defaults[name].parent, cleaned, untouched, tmp_path / "more"
        )
    assert final > window[-1]


def test_cleanup_rules_for_the_default_formats(defaults, tmp_path) -> None:
    """Nothing a retained batch reads goes, each Hadoop .crc follows its file, Spark's temp file of
    a killed write goes once past the grace period, and a live query keeps two versions of margin."""
    from testbed.clock import date_back
    from tests.support.planning import candidates_of

    path = copy_default(defaults, "hdfs_agg", tmp_path)
    date_back(path, 86_400)  # the query's files a day old; the temp file below is written now
    folder = path / "state" / "0" / "1"
    uid = "0a1b2c3d-0000-4000-8000-000000000000"
    (folder / f".26.delta.{uid}.TID9.tmp").write_bytes(b"half a delta")
    (folder / f"..26.delta.{uid}.TID9.tmp.crc").write_bytes(b"crc")
    plan = plan_later(path, retain_batches=3)
    chosen = {c.path: c.reason for c in candidates_of(plan)}
    ckpt_ = load_checkpoint(str(path))
    for batch in (22, 23, 24):
        for entry in checkpoint_lineage(ckpt_, batch):
            for f in (entry.base, *entry.chain):
                assert f is None or f.rel not in chosen, (batch, f)
    assert chosen[f"state/0/1/.26.delta.{uid}.TID9.tmp"] == "killed_write"
    assert chosen[f"state/0/1/..26.delta.{uid}.TID9.tmp.crc"] == "killed_write"
    mains = {p for p in chosen if not p.rsplit("/", 1)[1].startswith(".")}
    hidden = {p for p in chosen if p.rsplit("/", 1)[1].startswith(".") and p.endswith(".crc")}
    assert {classify(p).main for p in hidden} - mains == {f"state/0/1/.26.delta.{uid}.TID9.tmp"}
    # Spark's timed maintenance decides where its snapshots are: the ones below the oldest retained
    # base (at least Spark's first, after 10 deltas) go.
    kept = next(e for e in checkpoint_lineage(ckpt_, 22) if e.store.partition == 1).base
    older = {f"state/0/1/{p.name}" for p in folder.glob("*.snapshot") if int(p.stem) < kept.what.version}
    assert older and older <= set(chosen) and kept.rel not in chosen
    import time

    from tests.support.planning import plan_of

    now = {c.path for c in candidates_of(plan_of(path, now=time.time(), retain_batches=3))}
    assert older <= now and f"state/0/1/.26.delta.{uid}.TID9.tmp" not in now  # in progress?
    live = plan_later(path, retain_batches=1, query_stopped=False, quiet_seconds=LATER + 3600)
    assert live.live
    going = {c.path for c in candidates_of(live)}
    assert going and not {p for p in going if (classify(p).version or 0) >= 24}  # two versions of margin
    assert live.kept["live_query_temp_file"] == 1  # a running query may be writing it: no age tells
