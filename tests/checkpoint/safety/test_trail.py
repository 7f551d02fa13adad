"""The audit trail on real checkpoints' plans: what it keeps and prunes, on a manual clock, and a
manifest's bytes however its parts were assembled."""

from __future__ import annotations

import dataclasses
import json
import os
import time

from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from tests.support.planning import LATER, apply_unleased, manifest_lines, plan_of


def test_the_audit_trail_keeps_the_newest_plans_and_a_month_of_the_rest(copy_of, tmp_path) -> None:
    """Scenarios on a manual clock: 13 plans a minute apart; the newest 10 stay whatever their age,
    older ones go once 30 days old, and the removal is recorded before anything is deleted."""
    from checkpoint.safety.naming import folder_name

    path = copy_of("two_actions")
    audit = AuditTrail(str(tmp_path / "audit"))
    start = time.time() + LATER
    plans = [plan_of(path, audit=audit, now=start + 60 * i) for i in range(13)]
    apply_unleased(plans[0], Storage(str(path)), audit)  # the oldest has outcomes too: they go with it
    folder = tmp_path / "audit" / folder_name(str(path))
    assert audit.latest_plan(str(path)) == dataclasses.replace(plans[-1], digest="")

    def age(plan, days: float) -> None:
        for f in folder.glob(f"{plan.plan_id}.*"):
            os.utime(f, (time.time() - days * 86400,) * 2)

    for plan in plans[:12]:
        age(plan, 40)
    age(plans[1], 20)  # beyond the newest ten but younger than a month: stays
    assert audit.prune(str(path), time.time()) == [plans[0].plan_id, plans[2].plan_id]
    left = sorted({f.name.split(".", 1)[0] for f in folder.glob("*.jsonl") if f.name != "pruned.jsonl"})
    assert left == sorted(p.plan_id for p in plans if p not in (plans[0], plans[2]))
    record = json.loads((folder / "pruned.jsonl").read_text().splitlines()[-1])
    assert record["removed_plans"] == [plans[0].plan_id, plans[2].plan_id] and record["files"] == 3
    assert audit.prune(str(path), time.time()) == []  # nothing more is due
    assert audit.latest_plan(str(path)) == dataclasses.replace(plans[-1], digest="")


def test_the_manifest_is_the_same_bytes_however_its_parts_are_copied(copy_of, tmp_path, monkeypatch) -> None:
    """Decided in worker processes, a plan's lines come in a file per partition, assembled into the
    manifest by the kernel (sendfile) where it can: the same bytes as Python's copy, including after
    a sendfile that fails part-way."""
    path, now = copy_of("two_actions"), time.time() + LATER

    def manifest(trail: str) -> list[bytes]:
        plan = plan_of(path, AuditTrail(str(tmp_path / trail)), now=now, workers=2)
        assert plan.files > 0
        return manifest_lines(plan.manifest, plan.plan_id)

    by_kernel = manifest("kernel")
    real_sendfile, calls = os.sendfile, []

    def sendfile_that_breaks(out: int, src: int, offset: int, count: int) -> int:
        calls.append(offset)
        if offset > 0:
            raise OSError(22, "Invalid argument")
        return real_sendfile(out, src, offset, min(count, 100))

    monkeypatch.setattr(os, "sendfile", sendfile_that_breaks)
    assert manifest("python") == by_kernel
    assert 0 in calls and any(offset == 100 for offset in calls)  # it broke after 100 bytes were sent
