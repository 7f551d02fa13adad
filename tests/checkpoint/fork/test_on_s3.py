"""Forks on S3: local to S3 to S3 and back, restarted; server-side copies. That a fork's requests
do not grow with history is in `tests/checkpoint/test_history_on_s3.py`."""

from __future__ import annotations

from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from tests.support.s3 import direct, keys, via_proxy


def test_a_fork_goes_local_to_s3_to_s3_and_back_and_restarts_like_the_original(
    s3, spark, corpus, corpus_root, tmp_path
) -> None:
    """list_state: operator metadata v2 names its schema by absolute path, which each hop moves."""
    from testbed.corpus import scenario_named
    from tests.support.forking import fork
    from tests.support.state import restart_like_untouched

    _, proxy, bucket = s3
    options = via_proxy(s3)
    name = "list_state"
    a, b = f"s3://{bucket}/forks/{name}-a", f"s3://{bucket}/forks/{name}-b"
    local = copy_checkpoint(corpus[name], tmp_path / "local" / name)  # a fork leases its source
    to_s3 = fork(Storage(str(local)), Storage(a, options))
    assert to_s3.server_side_files == 0 and to_s3.copied_files == to_s3.files
    meta = direct(s3).cat_file(f"{a[len('s3://') :]}/state/0/_metadata/v2/0").decode()
    assert f'"s3a://{a[len("s3://") :]}/state/0/_stateSchema/default/' in meta and str(local) not in meta

    proxy.reset()
    within = fork(Storage(a, options), Storage(b, options))
    counts = proxy.counts()
    written = {"metadata", "state/0/_metadata/v2/0"} | {r for r in keys(s3, b) if r.endswith(".crc")}
    assert within.server_side_files == within.files - len(written)  # all but what was rewritten or read
    assert counts["CopyObject"] == within.server_side_files
    assert not [r.path for r in proxy.requests if r.op == "GetObject" and r.path.endswith(".sst")]

    back = tmp_path / "back" / name
    home = fork(Storage(b, options), Storage(str(back)))
    assert {str(p.relative_to(back)) for p in back.rglob("*") if p.is_file()} == set(keys(s3, a))
    assert home.files == to_s3.files == within.files
    assert f"file:{back}/state/0/_stateSchema/" in (back / "state/0/_metadata/v2/0").read_text()
    untouched = tmp_path / "untouched" / name
    copy_checkpoint(corpus[name], untouched)
    scenario = scenario_named(name)
    restart_like_untouched(spark, scenario, corpus_root / name, back, untouched, tmp_path / "more-input")
