"""Expired state on S3: reported as locally, purged by conditional PUTs, restarted."""

from __future__ import annotations

import json
import re
import time

import pytest

from checkpoint.storage import Storage
from testbed.copying import upload_checkpoint
from tests.support.cli import ckpt
from tests.support.s3 import cli


def test_expired_state_on_s3_is_reported_as_locally_purged_and_restarts_like_its_control(
    ports, s3, spark, tmp_path
) -> None:
    """The report names every file from the logs (no listing inside a store's folder), equals the
    local one; the purge publishes each store's snapshot by conditional puts, and the query
    restarted from the bucket (s3a) ends like an untouched local copy."""
    from testbed.operators import ensure_operator_corpus
    from testbed.restart import differences, restart
    from tests.checkpoint.expiry.test_expiry import NAME, by_variable, stopped_query

    server, proxy, bucket = s3
    corpus = ensure_operator_corpus()
    url = upload_checkpoint(server.filesystem(), corpus / NAME / "checkpoint", f"{bucket}/expiry/{NAME}")
    control = stopped_query(corpus, tmp_path / "control")
    as_of = str(time.time())

    def run(*args: str) -> dict:
        out = cli(proxy, "purge-expired", url, "--as-of", as_of, "--json", *args)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    local = json.loads(ckpt("purge-expired", str(control), "--report", "--as-of", as_of, "--json").stdout)
    proxy.reset()
    report = run("--report")
    assert by_variable(report) == by_variable(local) and report["expired"] > 0
    inside = [
        r for r in proxy.requests if r.op == "ListObjectsV2" and re.search(r"state/\d+/\d+", r.prefix or "")
    ]
    assert inside == []  # every state file named from the logs and the zips
    proxy.reset()
    done = run(
        "--quiet-period", "0s", "--unsafe-short-quiet-period"
    )  # just uploaded: its objects are minutes old
    assert {s["outcome"] for s in done["stores"]} == {"purged"} and done["expired"] == report["expired"]
    puts = [r for r in proxy.requests if r.op == "PutObject" and r.path.endswith(".zip")]
    assert len(puts) == len(done["stores"]) and all(r.condition for r in puts)  # If-None-Match: never over
    assert run("--report")["expired"] == 0
    ports.reach(Storage(url, server.storage_options()))  # Spark's s3a settings for the bucket
    changed = restart(spark, NAME, corpus / NAME, Storage(url).spark_url, tmp_path / "extra")
    assert differences(changed, restart(spark, NAME, corpus / NAME, control, tmp_path / "extra")) == []


@pytest.mark.parametrize("name", ["stopped_midbatch", "stopped_midbatch_v1"])
def test_a_query_stopped_mid_batch_on_s3_is_purged_as_its_replay_sees_it(
    ports, s3, spark, tmp_path, name
) -> None:
    """The purge time read from the batch planned and not committed, on S3 as locally; the query
    restarted from the bucket (its replay of that batch first) ends like an untouched local copy."""
    from testbed.operators import ensure_operator_corpus
    from testbed.restart import differences, restart
    from tests.checkpoint.expiry.test_expiry import by_variable, stopped_query
    from tests.checkpoint.expiry.test_midbatch import planned

    server, proxy, bucket = s3
    corpus = ensure_operator_corpus()
    url = upload_checkpoint(server.filesystem(), corpus / name / "checkpoint", f"{bucket}/midbatch/{name}")
    control = stopped_query(corpus, tmp_path / "control", name)
    batch, own = planned(control)
    local = json.loads(ckpt("purge-expired", str(control), "--report", "--json").stdout)
    out = cli(proxy, "purge-expired", url, "--json", "--quiet-period", "0s", "--unsafe-short-quiet-period")
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert (done["replays"], done["as_of_ms"]) == (batch, own) == (local["replays"], local["as_of_ms"])
    assert {s["outcome"] for s in done["stores"]} == {"purged"} and by_variable(done) == by_variable(local)
    ports.reach(Storage(url, server.storage_options()))
    changed = restart(spark, name, corpus / name, Storage(url).spark_url, tmp_path / "extra")
    assert differences(changed, restart(spark, name, corpus / name, control, tmp_path / "extra")) == []
