"""The maintenance lease on S3: conditional PUTs, one holder ever."""

from __future__ import annotations

import time

import pytest

from checkpoint.storage import Storage
from tests.support.s3 import via_proxy


def test_the_lease_on_s3_is_a_conditional_put(s3, tmp_path) -> None:
    from checkpoint.errors import LeaseHeld
    from checkpoint.safety.lease import Lease

    _, proxy, bucket = s3
    options = via_proxy(s3)
    a = Lease(Storage(f"s3://{bucket}/audit-lease", options), "orders-1234", "ckpt compact")
    b = Lease(
        Storage(f"s3://{bucket}/audit-lease", options),
        "orders-1234",
        "dagster run 9c1e (checkpoint_compaction)",
    )
    a.acquire()
    with pytest.raises(LeaseHeld, match="ckpt compact"):
        b.acquire()
    proxy.reset()
    with pytest.raises(FileExistsError):  # S3 itself refuses a second create of a generation
        b.storage.write_if_absent(a._rel(a.generation), b"{}", ".ckpt-maint-")
    assert proxy.counts() == {"PutObject": 1} and proxy.requests[0].condition == "If-None-Match"
    proxy.reset()
    taken = tmp_path / "taken"
    taken.write_bytes(b"not a generation")
    with pytest.raises(FileExistsError):  # and so does a file put streamed from disk
        b.storage.put_new(str(taken), a._rel(a.generation), ".ckpt-maint-")
    assert proxy.counts() == {"PutObject": 1} and proxy.requests[0].condition == "If-None-Match"
    a.release()
    b.acquire()
    assert b.current()[1].owner.startswith("dagster run 9c1e")
    b.release()
    assert b.current() is None


def test_one_holder_ever_on_s3_the_aba_sequence_and_a_renewal_by_etag(s3) -> None:
    """The ABA sequence of the local test, on SeaweedFS: generations never repeat, the stale holder
    stops; and a renewal is a PUT `If-Match` on the ETag its holder wrote, so a generation someone
    else rewrote is never renewed over. Real time, with a TTL of 2 s: a takeover needs the record
    unwritten for the TTL by S3's own clock (LastModified, whole seconds), which no manual clock moves."""
    from checkpoint.errors import LeaseHeld, LeaseLost
    from checkpoint.safety.lease import Lease

    _, proxy, bucket = s3
    options = via_proxy(s3)

    def lease(owner: str) -> Lease:
        return Lease(Storage(f"s3://{bucket}/audit-aba", options), "q", owner, ttl=2)

    a = lease("A").acquire()
    with pytest.raises(LeaseHeld, match="A on"):
        lease("B").acquire()
    time.sleep(2.2)  # A stalls past its expiry and its TTL
    b = lease("B").acquire()
    assert b.took_over is not None and b.took_over.owner == "A"
    held_by_b = b.generation
    b.release()
    d = lease("D").acquire()
    assert d.generation > held_by_b > a.generation
    a._expires = time.time() + 60  # even were A to believe it renewed in time
    with pytest.raises(LeaseLost):
        a.check()
    proxy.reset()
    d.renew()
    assert [(r.op, r.condition) for r in proxy.requests if r.method == "PUT"] == [("PutObject", "If-Match")]
    # Someone rewrites D's generation behind its back (same token, so only the ETag can tell).
    d.storage.write(d._rel(d.generation), d._body(time.time() + 61))  # other bytes, another ETag
    with pytest.raises(LeaseLost, match="changed under its holder"):
        d.renew()
