"""The computed replay chain is exactly what Spark needs to load a store."""

from __future__ import annotations

import pytest

from checkpoint.format.layout import FileKind
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import checkpoint_lineage
from tests.support.damage import remove


def test_lineage_document_fields(loaded) -> None:
    ckpt = loaded["long_chain"]
    entries = checkpoint_lineage(ckpt)
    assert len(entries) == 4
    for e in entries:
        assert (e.version, e.snapshot_version, e.chain_length) == (32, 0, 32)
        assert [f.what.version for f in e.chain] == list(range(1, 33))
        assert e.replay_bytes == sum(f.info.size for f in e.chain) > 0
        assert e.lineage_header_bytes == e.header.header_bytes > 2000
        assert e.loadable


def test_lineage_at_an_older_batch(loaded) -> None:
    ckpt = loaded["snapshots"]
    latest = {e.store: e for e in checkpoint_lineage(ckpt)}
    older = {e.store: e for e in checkpoint_lineage(ckpt, batch=4)}
    assert all(e.version == 5 for e in older.values()) and all(e.version == 12 for e in latest.values())
    for e in older.values():
        assert e.snapshot_version is not None and e.snapshot_version <= 5
        assert [f.what.version for f in e.chain] == list(range(e.snapshot_version + 1, 6))


def test_lineage_rejects_a_batch_not_in_the_commit_log(loaded) -> None:
    with pytest.raises(Exception, match="batch 99 is not in the commit log"):
        checkpoint_lineage(loaded["snapshots"], batch=99)


def test_format_v1_lineage(loaded) -> None:
    for e in checkpoint_lineage(loaded["format_v1"]):
        assert e.unique_id is None and e.loadable
        assert [f.what.version for f in e.chain] == list(
            range(e.snapshot_version + 1, e.snapshot_version + 1 + len(e.chain))
        )


def _state(spark, path, batch):
    rows = spark.read.format("statestore").option("batchId", batch).load(str(path)).collect()
    return sorted(map(repr, rows))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["watermark", "two_actions", "dedup_agg"])
def test_spark_loads_the_computed_chain_and_nothing_older(spark, copy_of, name) -> None:
    path = copy_of(name)
    ckpt = load_checkpoint(str(path))
    batch = ckpt.latest_committed_batch
    lineage = checkpoint_lineage(ckpt)
    before = _state(spark, path, batch)
    assert before

    needed = {f.rel for e in lineage for f in e.chain}
    removed = 0
    for e in lineage:
        assert e.base is not None, e.store
        for f in ckpt.stores[e.store].files:
            older = f.kind == FileKind.CHANGELOG and f.what.version <= e.base.what.version
            other_attempt = (
                f.kind == FileKind.CHANGELOG and f.what.version > e.base.what.version and f.rel not in needed
            )
            if older or other_attempt:
                remove(path / f.rel)
                removed += 1
    assert removed > 0
    assert _state(spark, path, batch) == before

    inside = next((e for e in lineage if e.chain), None)
    if inside is None:  # every store loads its committed zip directly: take the zip away instead
        inside = lineage[0]
        remove(path / inside.base.rel)
    else:
        remove(path / inside.chain[0].rel)
    with pytest.raises(Exception):  # noqa: B017 - Spark's error type varies with where the load fails
        _state(spark, path, batch)
