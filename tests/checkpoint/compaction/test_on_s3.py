"""Compaction on S3: the driver names every file, each snapshot published by one conditional
PUT, and Spark loads the result."""

from __future__ import annotations

import pytest

from checkpoint.model.head import load_head
from tests.support.s3 import direct, restarts_like_untouched, via_proxy


@pytest.mark.slow
def test_compaction_reads_and_writes_s3_and_spark_loads_the_result(
    s3, s3_copy_of, spark, corpus, corpus_root, tmp_path
) -> None:
    from checkpoint.compaction.targets import CompactionPlanOptions, plan_compaction
    from tests.checkpoint.compaction.test_compaction import _rows_of_partition, _snapshot_rows
    from tests.support.compacting import compact_unleased

    _, proxy, _ = s3
    url, options = s3_copy_of("long_chain"), via_proxy(s3)
    ckpt = load_head(url, options, recent=2)
    targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0)).targets
    assert len(targets) == 4
    proxy.reset()
    results = compact_unleased(spark, ckpt, targets)
    assert all(r.ok for r in results), results
    results = [r.rebuilt for r in results]
    counts = proxy.counts()
    assert counts["ListObjectsV2"] + counts["ListObjects"] == 0  # the driver hands each task its files
    written = sum(r.ssts_written for r in results)
    assert counts["PutObject"] == written + 2 * len(results)  # new SSTs, then each zip and its .crc
    # Before each zip, one HEAD per SST it lists (new or reused): never a listing of SSTs/. And
    # before anything is written, one for the zip's name and one for its sidecar's: both free.
    heads = [r.path for r in proxy.requests if r.op == "HeadObject"]
    listed = sum(r.ssts_written + r.ssts_reused for r in results)
    ssts = [p for p in heads if p.endswith(".sst")]
    names = sorted(p.rsplit("/", 1)[1] for p in heads if not p.endswith(".sst"))
    zips = sorted(r.path.rsplit("/", 1)[1] for r in results)
    assert len(ssts) == listed and names == sorted(zips + [z + ".crc" for z in zips]), heads
    assert counts["DeleteObject"] + counts["DeleteObjects"] == 0

    local = tmp_path / "snapshots-read"
    direct(s3).get(url[len("s3://") :] + "/", str(local), recursive=True)
    for r in results:
        batch = r.version - 1
        expected = _rows_of_partition(spark, corpus["long_chain"], batch, r.partition, {})
        assert _snapshot_rows(spark, local, batch, r.partition, {}) == expected
    restarts_like_untouched(s3, spark, corpus, corpus_root, url, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hdfs_deltas", "rocksdb_v1_changelog"])
def test_v1_compaction_on_s3_publishes_by_conditional_puts_and_spark_loads_the_snapshot_alone(
    ports, s3, s3_copy_of, spark, defaults, tmp_path, name
) -> None:
    """The chain downloaded by name (no listing), each snapshot or zip published by one PUT that
    the store refuses over an existing object; copied back, Spark's reader loads the latest state
    from the new snapshots with every chain file before them gone."""
    from checkpoint.compaction.targets import CompactionPlanOptions, plan_compaction
    from tests.support.compacting import compact_unleased
    from tests.support.damage import remove
    from tests.support.defaults import V1_SESSION
    from tests.support.state import read_state

    _, proxy, _ = s3
    url = s3_copy_of(name)
    ckpt = load_head(url, via_proxy(s3), recent=2)
    targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=3, quiet_seconds=0)).targets
    assert len(targets) == 4
    proxy.reset()
    results = compact_unleased(spark, ckpt, targets)
    assert all(r.ok for r in results), [r.error for r in results]
    counts = proxy.counts()
    assert counts["ListObjectsV2"] + counts["ListObjects"] == 0
    assert counts["DeleteObject"] + counts["DeleteObjects"] == 0
    written = sum(r.rebuilt.ssts_written for r in results)  # none for the HDFS-backed store
    assert counts["PutObject"] == written + len(results)  # V1: no .crc sidecar
    local = tmp_path / name
    direct(s3).get(url[len("s3://") :] + "/", str(local), recursive=True)
    for t in targets:
        for f in (t.entry.base, *t.entry.chain):
            if f is not None:
                remove(local / f.rel)
    batch = ckpt.latest_committed_batch
    with ports.confs(V1_SESSION):
        assert read_state(spark, local, batch, name) == read_state(spark, defaults[name], batch, name)
