"""Repartition on S3, through s3a for Spark and fsspec for the rest, undone and done again."""

from __future__ import annotations

from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint


def test_an_s3_checkpoint_repartitioned_undone_and_again_restarts_like_its_control(
    ports, s3, spark, corpus, corpus_root, tmp_path
) -> None:
    """Spark's repartitioner and the restarted query reach the bucket through s3a (the session's
    per-bucket settings from the storage's own options); the listing before, the backup fork, the
    records and the undo go through fsspec."""
    from checkpoint.repartition import (
        RepartitionOptions,
        UndoOptions,
        repartition_checkpoint,
        undo_repartition,
    )
    from checkpoint.safety import InPlace, taken_at_once
    from testbed.restart import differences, restart
    from tests.support.forking import fork

    server, _, bucket = s3
    options = server.storage_options()  # straight to the server: Spark's client is not counted
    name = "snapshots"
    untouched = tmp_path / "untouched"
    copy_checkpoint(corpus[name], untouched)
    storage = Storage(f"s3://{bucket}/repartition/{name}", options)
    # As Spark would have written it there; from a copy, as a fork leases its source.
    fork(Storage(str(copy_checkpoint(corpus[name], tmp_path / "source"))), storage)
    audit = AuditTrail(f"s3://{bucket}/repartition-audit", options)

    def tree() -> dict[str, int]:
        return {f.rel: f.size for f in storage.list_files()}

    before = tree()
    request = InPlace(storage, taken_at_once("tests"), audit)
    options = RepartitionOptions(8, ports.repartition, quiet_seconds=0)
    first = repartition_checkpoint(request, options)
    assert {f.rel.split("/")[2] for f in storage.list_files("state/0") if f.rel.endswith(".zip")} >= {
        str(p) for p in range(8)
    }
    undone = undo_repartition(request, UndoOptions(query_stopped=True))
    assert undone.deleted > 0 and tree() == before
    again = repartition_checkpoint(request, options)
    for result in (first, again):
        assert (result.from_partitions, result.to_partitions) == (4, 8)
        assert all(s.digest_after == s.digest_before and s.rows > 0 for s in result.stores)
    changed = restart(spark, name, corpus_root / name, storage.spark_url, tmp_path / "extra")
    control = restart(spark, name, corpus_root / name, untouched, tmp_path / "extra")
    assert not differences(changed, control)
