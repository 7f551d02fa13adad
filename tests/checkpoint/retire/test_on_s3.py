"""Retirement on S3: an archive in another bucket, deletions batched by requests."""

from __future__ import annotations

import math
import time

from checkpoint.model.head import load_head
from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from tests.support.s3 import direct, keys, via_proxy


def test_retirement_archives_to_another_bucket_and_deletes_in_batches_of_requests(s3, s3_copy_of) -> None:
    """On a manual clock (an upload is new to S3): planned nine days on, applied after the grace.
    What an apply costs per checkpoint, counted at the proxy: the fork of what recovery reads (the
    same requests as a plain fork of a copy), one DeleteObjects and one record per batch of
    deletions, and a constant (two leases, two listings, the other records)."""
    from checkpoint.analysis import Severity, validate
    from checkpoint.retire import (
        RetirementPlanOptions,
        RetireOptions,
        apply_retirement,
        plan_retirement,
        read_retirement,
        retirement_request,
    )
    from checkpoint.safety import taken_at_once
    from tests.support.forking import fork

    _, proxy, bucket = s3
    options = via_proxy(s3)
    cold = f"{bucket}-cold"
    direct(s3).mkdir(cold)
    proxy.reset()
    fork(Storage(s3_copy_of("long_chain"), options), Storage(f"s3://{cold}/plain", options))
    plain = sum(proxy.counts().values())
    later = time.time() + 9 * 86400
    cost = {}
    for size in (100, 1000):
        url = s3_copy_of("long_chain")
        archive = Storage(f"s3://{cold}/orders-{size}", options)
        trail = AuditTrail(AuditTrail.default_for(url), options)
        request = retirement_request(Storage(url, options), archive, taken_at_once("test"), trail)
        plan = plan_retirement(request, RetirementPlanOptions(now=later))
        assert plan.files == len(keys(s3, url))
        _, read = read_retirement(plan.manifest, options)
        proxy.reset()
        retired = apply_retirement(request, RetireOptions(read, later + 8 * 86400, batch_size=size))
        counts = proxy.counts()
        fs = direct(s3)
        fs.invalidate_cache()  # SeaweedFS keeps an emptied folder as a "directory" entry: no object
        assert not [k for k, v in fs.find(url[len("s3://") :], detail=True).items() if v["type"] == "file"]
        assert retired.deleted_files == plan.files
        assert counts["DeleteObjects"] == math.ceil(plan.files / size)
        forked = {r.path for r in proxy.requests if r.op == "CopyObject"}
        assert forked and all(f"/{cold}/orders-{size}/" in p for p in forked)  # server-side, the other bucket
        findings = validate(load_head(archive, strict=True)).findings
        assert not [f for f in findings if f.severity == Severity.ERROR]
        cost[size] = sum(counts.values()) - plain
    batches = math.ceil(plan.files / 100) - math.ceil(plan.files / 1000)
    # A batch more: its DeleteObjects, its record (a part object on S3) and that part read when
    # sealed, and the check of both leases before it (a listing and a GET each).
    assert cost[100] - cost[1000] == 7 * batches, cost
    # The rest: the archive read back and validated (what recovery reads, as the fork), leases,
    # listings and records: never more than the fork itself.
    print("S3 retirement requests beyond a plain fork", plain, cost)
    assert cost[1000] <= plain, (plain, cost)
