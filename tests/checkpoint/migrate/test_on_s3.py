"""Migration to RocksDB V2 onto S3, from S3 and from local disk."""

from __future__ import annotations

import pytest

from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from tests.support.cli import ckpt
from tests.support.s3 import cli, via_proxy


@pytest.mark.slow
@pytest.mark.parametrize(("where", "name"), [("s3-to-s3", "hdfs_agg"), ("local-to-s3", "hdfs_agg"),
                                             ("s3-to-s3", "rocksdb_v1_every_state")])  # fmt: skip
def test_a_migration_onto_s3_restarts_like_its_source(
    ports, s3, s3_copy_of, spark, defaults, tmp_path, where, name
) -> None:
    """SeaweedFS to SeaweedFS (the logs copied server-side, no listing of SRC's state) and a local
    source to S3, of an aggregation and of transformWithState's column families (value, list and
    map state with TTLs): DEST, forked back, validates as V2 and the real query restarts on it like
    an untouched copy of the source."""
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from checkpoint.safety import TwoSided, taken_at_once
    from tests.support.migrating import restarted_differently

    _, proxy, bucket = s3
    if where == "s3-to-s3":
        src = Storage(s3_copy_of(name), via_proxy(s3))
    else:  # a copy: the migration leases its source
        src = Storage(str(copy_checkpoint(defaults[name], tmp_path / "src")))
    dest = Storage(f"s3://{bucket}/migrated-{where}-{name}", via_proxy(s3))
    audit = AuditTrail(f"s3://{bucket}/audit-migrate-{where}-{name}", via_proxy(s3))
    proxy.reset()
    request = TwoSided(src, dest, taken_at_once("tests"), audit)
    result = migrate_checkpoint(request, MigrationOptions(ports.migration, quiet_seconds=0))
    assert result.proven and len(result.stores) == 4
    if where == "s3-to-s3":  # every log file but the batch's rewritten two is copied server-side
        ours = [
            r.path for r in proxy.requests if r.op == "CopyObject" and f"migrated-{where}-{name}" in r.path
        ]
        copied = {"/".join(p.rsplit("/", 2)[-2:]) for p in ours}
        logs = {f"{kind}/{b}" for kind in ("offsets", "commits") for b in range(result.batch)}
        assert logs <= copied and not {f"offsets/{result.batch}", f"commits/{result.batch}"} & copied
    local, control = tmp_path / "dest", copy_checkpoint(defaults[name], tmp_path / "control")
    # Forked back, not copied: the fork rewrites the schema paths a transformWithState operator records.
    assert cli(proxy, "fork", dest.url, str(local)).returncode == 0
    assert ckpt("validate", str(local)).returncode == 0
    if where == "local-to-s3":
        return  # the same DEST as from S3; one restart proves it
    assert not restarted_differently(spark, name, defaults[name].parent, local, control, tmp_path / "more")
