"""The storage's one door on S3, against a real server: a listing is not kept, a read is one GET,
throttling is retried by one policy, a listing cut part way fails, credentials come from the
environment, a download is checked against its size, what was appended is read back in order."""

from __future__ import annotations

import os

import pytest

from checkpoint.errors import NotACheckpointError, StorageError
from checkpoint.model import load_census
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from tests.support.cli import ckpt
from tests.support.planning import apply_unleased, plan_of
from tests.support.s3 import cli, direct, planned_on, via_proxy, with_attempts


def test_a_listing_is_not_kept_and_a_listed_file_is_read_by_one_get(s3, s3_copy_of) -> None:
    """s3fs keeps every entry a recursive listing sees in a cache that nothing here reads: a plan
    listing partition after partition would hold the whole checkpoint by its end. A read of a file
    whose size is known is one GET, with no HEAD first, cache or not."""
    _, proxy, _ = s3
    storage = Storage(s3_copy_of("long_chain"), via_proxy(s3))
    files = storage.list_files("state/0/0")
    assert files and not [k for k in storage.fs.dircache if k.startswith(storage.root)]
    changelog = next(f for f in files if f.rel.endswith(".changelog") and f.size > 0)
    proxy.reset()
    with storage.open(changelog.rel, block_size=128 * 1024, size=changelog.size) as fh:
        assert fh.read(4)
    assert proxy.counts() == {"GetObject": 1}


def test_throttling_is_retried_once_by_one_policy(s3, s3_copy_of, tmp_path) -> None:
    """botocore's adaptive retries alone: a throttled request is sent again by the client, never
    by s3fs or by us on top (which once made 12 throttles cost 13 requests and up to 36 tries)."""
    _, proxy, bucket = s3
    url, options = s3_copy_of("two_actions"), with_attempts(s3, 3)
    audit = AuditTrail(str(tmp_path))
    plan, planned = planned_on(url, options, audit)
    proxy.reset()
    proxy.faults.slowdown = {"DeleteObjects": 2, "ListObjectsV2": 2}
    sleeps: list[float] = []
    result = apply_unleased(plan, Storage(url, options), audit, sleep=sleeps.append)
    assert result.deleted.files == plan.files and not result.failed.files
    assert proxy.counts()["DeleteObjects"] == 3 and sleeps == []  # 2 throttles, 1 success; no re-drive

    url = s3_copy_of("two_actions")
    plan, planned = planned_on(url, options, audit)
    proxy.reset()
    proxy.faults.slowdown = {"DeleteObjects": 5}  # more than the 3 attempts allow
    result = apply_unleased(plan, Storage(url, options), audit, sleep=sleeps.append)
    assert proxy.counts()["DeleteObjects"] == 3 and not result.deleted.files
    assert result.failed.files == plan.files and all("SlowDown" in o.why for o in result.failed.sample)
    # One listing, not a HEAD per object (a quarter of a second each here).
    left = set(direct(s3).find(url[len("s3://") :]))
    assert {f"{url[len('s3://') :]}/{c.path}" for c in planned} <= left


def test_a_listing_cut_part_way_fails_instead_of_shrinking(s3, s3_copy_of, tmp_path, monkeypatch) -> None:
    _, proxy, bucket = s3
    # Two requests per call, not the default ten: a page that fails is retried with back-off (up to
    # a minute and a half for each of the four calls below), and the retries are not what this tests.
    url, options = s3_copy_of("two_actions"), with_attempts(s3, 2)
    audit = AuditTrail(str(tmp_path))
    plan, _ = planned_on(url, options, audit)
    calls = [
        lambda: load_checkpoint(url, options),
        lambda: plan_of(Storage(url, options), audit),  # a plan can't be built from a partial listing
        lambda: apply_unleased(plan, Storage(url, options), audit, sleep=lambda s: None),
        lambda: load_census(url, options),  # `ckpt inspect`: a page at a time, the same failure
    ]
    for call in calls:
        proxy.reset()  # its requests and its faults
        proxy.faults.cut_listing_after = 5
        with pytest.raises(StorageError, match="listing failed"):
            call()
        # the first page, then the cut page's two attempts: the listing stops there
        assert proxy.counts() == {"ListObjectsV2": 3}
    proxy.reset()
    proxy.faults.cut_listing_after = 5
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # the CLI takes the standard variable
    out = cli(proxy, "gc", url, "--json")
    assert out.returncode == 2 and "listing failed" in out.stderr and "Traceback" not in out.stderr
    assert proxy.counts() == {"ListObjectsV2": 3}


def test_a_walk_is_the_listing_a_page_at_a_time(s3, s3_copy_of) -> None:
    """`Storage.pages`: what one listing gives, in its order, at most a page at a time (7 here,
    1,000 by default), a folder's delimiter listing at a time (one ListObjectsV2 each, under 1,000
    keys), never the whole tree at once, whatever order the store lists keys in (SeaweedFS lists
    `commits/9` before `commits.bak`); a missing root is an error."""
    _, proxy, bucket = s3
    url = s3_copy_of("join")
    direct(s3).pipe(
        {f"{url.removeprefix('s3://')}/commits.bak": b"x", f"{url.removeprefix('s3://')}/a/b.c": b"y"}
    )
    storage = Storage(url, via_proxy(s3))
    whole = storage.list_files()
    proxy.reset()
    pages = list(storage.pages(page=7))
    walked = [f for p in pages for f in p]
    assert [f.rel for f in walked] == sorted(f.rel for f in whole) and max(map(len, pages)) == 7
    assert {(f.rel, f.size) for f in walked} == {(f.rel, f.size) for f in whole}
    folders = {""} | {f.rel.rsplit("/", i)[0] for f in whole for i in range(1, f.rel.count("/") + 1)}
    assert proxy.counts() == {"ListObjectsV2": len(folders)}
    with pytest.raises(NotACheckpointError):
        list(Storage(f"s3://{bucket}/nothing-here", via_proxy(s3)).pages())


def test_credentials_from_the_environment_and_clear_errors(s3, s3_copy_of) -> None:
    _, proxy, bucket = s3
    url = s3_copy_of("long_chain")
    denied = ckpt(
        "inspect", url, env={"AWS_ENDPOINT_URL": proxy.endpoint, "AWS_SECRET_ACCESS_KEY": "wrong-secret-123"}
    )
    assert denied.returncode == 2 and "wrong-secret-123" not in denied.stderr + denied.stdout
    assert "Traceback" not in denied.stderr and len(denied.stderr.splitlines()) == 1, denied.stderr
    missing = cli(proxy, "inspect", f"s3://{bucket}/no/such/checkpoint")
    assert missing.returncode == 2 and "no such" in missing.stderr


def test_a_download_is_one_ranged_get_per_chunk_and_catches_a_wrong_size(s3, tmp_path) -> None:
    import crc32c

    _, proxy, bucket = s3
    data = os.urandom(2500)
    direct(s3).pipe(f"{bucket}/download/blob", data)
    storage = Storage(f"s3://{bucket}/download", via_proxy(s3))
    proxy.reset()
    assert storage.download("blob", str(tmp_path / "a"), 2500, chunk=1000) == (2500, crc32c.crc32c(data))
    assert (tmp_path / "a").read_bytes() == data
    assert proxy.counts() == {"GetObject": 3}  # the size came from the zip's metadata: no HEAD
    for expected, read in ((2499, 2500), (2501, 2500)):  # one byte longer, one byte shorter than listed
        with pytest.raises(StorageError, match=f"read {read} bytes where {expected} were expected"):
            storage.download("blob", str(tmp_path / "b"), expected, chunk=1000)
    proxy.reset()
    assert storage.download("blob", str(tmp_path / "c"), chunk=4096)[0] == 2500  # size unknown: a HEAD
    assert proxy.counts() == {"HeadObject": 1, "GetObject": 1}


def test_an_upload_goes_a_part_of_8_mib_at_a_time(s3, tmp_path) -> None:
    """s3fs reads a file of less than 100 MiB whole before it sends it (its parts are 50 MiB): a
    manifest of 20 MiB goes up in three parts, so the upload holds one part, not the file."""
    _, proxy, bucket = s3
    data = os.urandom(20 << 20)
    (tmp_path / "manifest").write_bytes(data)
    storage = Storage(f"s3://{bucket}/upload", via_proxy(s3))
    proxy.reset()
    storage.put_file(str(tmp_path / "manifest"), "manifest.jsonl")
    assert proxy.counts() == {"CreateMultipartUpload": 1, "UploadPart": 3, "CompleteMultipartUpload": 1}
    assert direct(s3).cat(f"{bucket}/upload/manifest.jsonl") == data


def test_what_was_appended_is_read_back_in_order_in_place_or_in_parts(s3, tmp_path) -> None:
    """S3 has no append: each `append` is a part object of its own, read back in the order of its
    number, one GET each, and sealed as one file. A local disk
    appends in place: the file is read back, and sealing writes nothing."""
    _, _, bucket = s3
    for storage in (Storage(f"s3://{bucket}/appends", via_proxy(s3)), Storage(str(tmp_path / "appends"))):
        written = [b'{"n": %d}\n' % n for n in range(12)]
        for data in written:
            storage.append("trail/log.jsonl", data)
        pieces = [(rel, stream.read()) for rel, stream in storage.appended("trail/log.jsonl", part_limit=64)]
        assert b"".join(data for _, data in pieces) == b"".join(written)
        in_place = not storage.url.startswith("s3://")
        assert len(pieces) == (1 if in_place else 12), pieces
        storage.seal_appended("trail/log.jsonl", lambda: b"whole\n")
        assert storage.read_bytes("trail/log.jsonl", limit=1024) == (
            b"".join(written) if in_place else b"whole\n"
        )
        assert list(storage.appended("trail/nothing.jsonl", part_limit=64)) == []


def test_a_file_keeps_hadoops_checksums_beside_it_on_a_local_disk_only(s3, tmp_path) -> None:
    _, _, bucket = s3
    assert Storage(str(tmp_path)).sidecars("5.zip") == [".5.zip.crc", ".5.zip.crc.crc"]
    assert Storage(f"s3://{bucket}/x", via_proxy(s3)).sidecars("5.zip") == []
