"""Cleanup's apply under the lease (`checkpoint.cleanup.apply_cleanup`), as `ckpt gc --apply` runs
it: planned under the lease, and planned again when the query moves on between that plan and its
check; the superseded plan says which replaced it. (The Dagster asset's path, with a plan made by an
earlier step, is in test_dagster_cleanup.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from checkpoint.cleanup import REPLANNED, CleanupOptions, GcPlanOptions, apply_cleanup, plan_cleanup, plan_gc
from checkpoint.errors import LeaseHeld
from checkpoint.safety import AuditTrail, InPlace, Plan, lease_for, taken_at_once
from checkpoint.storage import Storage
from testbed.clock import date_back
from testbed.copying import copy_checkpoint


@pytest.fixture
def aged(corpus: dict[str, Path], tmp_path: Path) -> Path:
    path = copy_checkpoint(corpus["two_actions"], tmp_path / "orders")
    date_back(path, 8 * 3600)  # past the grace period: the plan has candidates
    return path


def _planner(path: Path, audit: AuditTrail, made: list[Plan], move_after_first: bool = False):
    request = InPlace(Storage(str(path)), taken_at_once("tests"), audit)

    def plan() -> Plan:
        made.append(plan_gc(request, GcPlanOptions(query_stopped=True)))  # as `--query-stopped` says
        if move_after_first and len(made) == 1:  # the query plans a batch right after this plan
            latest = max(int(p.name) for p in (path / "offsets").iterdir() if p.name.isdigit())
            shutil.copy(path / "offsets" / str(latest), path / "offsets" / str(latest + 1))
        return made[-1]

    return plan


def test_a_plan_made_under_the_lease_is_applied_once(aged: Path, tmp_path: Path) -> None:
    audit, made = AuditTrail(str(tmp_path / "audit")), []
    request = InPlace(Storage(str(aged)), taken_at_once("tests"), audit)
    cleaned = apply_cleanup(request, CleanupOptions(_planner(aged, audit, made), what="gc --apply"))
    assert len(made) == 1 and cleaned.replanned is None and cleaned.plan is made[0]
    assert cleaned.result.deleted.files == made[0].files > 0
    assert not any((aged / o["path"]).exists() for o in audit.outcomes(made[0]) if o["outcome"] == "deleted")


def test_the_query_moving_on_after_the_plan_makes_a_new_one_and_the_old_says_so(
    aged: Path, tmp_path: Path
) -> None:
    audit, made = AuditTrail(str(tmp_path / "audit")), []
    request = InPlace(Storage(str(aged)), taken_at_once("tests"), audit)
    options = CleanupOptions(_planner(aged, audit, made, move_after_first=True), what="gc --apply")
    cleaned = apply_cleanup(request, options)
    first, second = made
    assert cleaned.replanned is first and cleaned.plan is second and second.live and not first.live
    assert [o["why"] for o in audit.outcomes(first)] == [f"{REPLANNED}: {second.manifest}"]
    # The live rules keep more: what only the first plan named is still there.
    assert 0 < cleaned.result.deleted.files < first.files
    deleted = {o["path"] for o in audit.outcomes(second) if o["outcome"] == "deleted"}
    kept = [c.path for chunk in audit.candidates(first) for c in chunk if c.path not in deleted]
    assert kept and all((aged / path).exists() for path in kept)


def test_a_held_lease_refuses_before_anything_is_planned(aged: Path, tmp_path: Path) -> None:
    audit, made = AuditTrail(str(tmp_path / "audit")), []
    request = InPlace(Storage(str(aged)), taken_at_once("tests"), audit)
    with lease_for(Storage(str(aged)), "someone else").acquire():
        with pytest.raises(LeaseHeld, match="someone else"):
            apply_cleanup(request, CleanupOptions(_planner(aged, audit, made), what="gc --apply"))
    assert made == []


def test_the_trail_is_pruned_by_the_core_after_a_dry_run_and_an_apply(aged: Path, tmp_path: Path) -> None:
    """Every adapter's plan and apply prune the trail the same way, because the core does it: the
    plans beyond the newest `audit_keep_plans` that are older than the retention go."""
    import os
    import time

    from checkpoint.policy import POLICY

    audit, made = AuditTrail(str(tmp_path / "audit")), []
    request = InPlace(Storage(str(aged)), taken_at_once("tests"), audit)
    for _ in range(POLICY.audit_keep_plans):
        plan_gc(request, GcPlanOptions(query_stopped=True))
    old = time.time() - POLICY.audit_retention_seconds - 3600
    for f in (tmp_path / "audit").rglob("*.plan.jsonl"):
        os.utime(f, (old, old))
    dry = plan_cleanup(request, CleanupOptions(_planner(aged, audit, made)))
    assert (
        dry.pruned == 1 and len(list((tmp_path / "audit").rglob("*.plan.jsonl"))) == POLICY.audit_keep_plans
    )
    cleaned = apply_cleanup(request, CleanupOptions(_planner(aged, audit, made), what="gc --apply"))
    assert cleaned.pruned == 1 and dry.plan.manifest != cleaned.plan.manifest
    assert len(list((tmp_path / "audit").rglob("*.plan.jsonl"))) == POLICY.audit_keep_plans
