"""Reading checkpoints on S3: the local answers, from what recovery reads; discovery never looks
inside a checkpoint. That the requests do not grow with history is in
`tests/checkpoint/test_history_on_s3.py`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from checkpoint.storage import Storage
from testbed.copying import hadoop_checksum
from tests.support.s3 import cli, same, via_proxy


@pytest.mark.parametrize("name", ["long_chain", "join_cf", "killed_after_restart"])
def test_read_only_commands_give_the_local_answers(s3, s3_copy_of, corpus, name) -> None:
    _, proxy, _ = s3
    url = s3_copy_of(name)
    for command in (["inspect"], ["lineage"], ["validate", "--deep"]):
        remote = cli(proxy, *command, url, "--json")
        local = cli(proxy, *command, str(corpus[name]), "--json")
        assert remote.returncode == local.returncode, (command, remote.stderr)
        remote_doc, local_doc = json.loads(remote.stdout), json.loads(local.stdout)
        if command == ["inspect"]:  # the same files and bytes; only mtimes differ after an upload
            moved = _renamed_bytes(corpus[name], url)  # operator metadata v2 names the S3 copy's place
            # Hadoop's hidden checksums are the local copy's alone (`upload_checkpoint`)
            hidden = [
                p.stat().st_size for p in corpus[name].rglob("*") if p.is_file() and hadoop_checksum(p.name)
            ]
            kinds = dict(local_doc["files"])
            assert kinds.pop("hadoop_crc") == len(hidden) and remote_doc["files"] == kinds
            assert remote_doc["bytes"] == local_doc["bytes"] - sum(hidden) + moved
        assert same(remote_doc, url, local_doc, str(corpus[name])) or command == ["inspect"], command


def _renamed_bytes(local: Path, url: str) -> int:
    from checkpoint.fork.plan import rewrite_schema_paths

    metas = local.glob("state/*/_metadata/v2/[!.]*")
    here = "s3a://" + url[len("s3://") :]
    return sum(len(rewrite_schema_paths(m.read_bytes(), here, str(m))) - m.stat().st_size for m in metas)


# What a head-first load may list inside a checkpoint: its root, the logs, `state/` (operators) and
# each operator (its partition folders, checked against what the logs declare), its metadata
# folders, and `sources/` with each source's log (as Spark's restart does). Never inside a
# partition folder, never recursively.
_HEAD_LISTINGS = re.compile(
    r"^(|commits/|offsets/|sources/(\d+/)?|state/|state/\d+/|state/\d+/_metadata/(v2/)?)$"
)


def test_scan_lists_folders_and_reads_what_recovery_reads(s3, s3_copy_of, corpus) -> None:
    _, proxy, bucket = s3
    names = ["long_chain", "join", "snapshots", "two_actions", "list_state"]
    urls = [s3_copy_of(name, prefix="economy") for name in names]
    proxy.reset()
    out = cli(proxy, "scan", f"s3://{bucket}/economy", "--json")
    assert out.returncode in (0, 1), out.stderr
    doc = json.loads(out.stdout)
    assert sorted(c["path"].rsplit("/", 1)[-1] for c in doc["checkpoints"]) == sorted(names)
    inside = [r for r in proxy.requests if r.op.startswith("List") and r.target.count("/") > 2]
    for r in inside:
        ckpt = next(u[len("s3://") :] + "/" for u in urls if r.target.startswith(u[len("s3://") :] + "/"))
        assert _HEAD_LISTINGS.match(r.target[len(ckpt) :]), r.target
    gets = [r for r in proxy.requests if r.op == "GetObject"]
    assert not [r for r in gets if r.path.endswith(".sst")]  # SSTs are only stat'ed
    header_reads = [r for r in gets if r.path.endswith(".changelog")]
    assert header_reads and all(r.ranged for r in header_reads)
    assert len(gets) == len({r.path for r in gets})  # no object read twice
    heads = [r.path for r in proxy.requests if r.op == "HeadObject"]
    assert len(heads) == len(set(heads))  # nor checked twice (a header read once cost a HEAD first)


def test_discovery_sends_no_request_inside_a_checkpoint(s3, s3_copy_of) -> None:
    from checkpoint.model.discovery import find_checkpoints

    _, proxy, bucket = s3
    urls = [s3_copy_of(name, prefix=f"fleet/{team}") for team, name in (("a", "snapshots"), ("b", "join"))]
    proxy.reset()
    found = find_checkpoints(Storage(f"s3://{bucket}/fleet", via_proxy(s3)))
    assert sorted(f.url for f in found) == sorted(urls)
    keys = [u[len("s3://") :] for u in urls]
    # Each checkpoint's own folder is listed once (to know it is one); nothing below it.
    targets = [r.target for r in proxy.requests]
    assert not [t for t in targets if any(t.startswith(k + "/") and t != k + "/" for k in keys)]
    assert sorted(t for t in targets if t.rstrip("/") in keys) == sorted(k + "/" for k in keys)
    assert set(proxy.counts()) == {"ListObjectsV2"}
