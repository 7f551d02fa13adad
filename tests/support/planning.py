"""Cleanup plans in tests: planned into an audit trail (a temporary one unless given), their
candidates read back from the manifest, as the apply reads them, and applied under no lease."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from checkpoint.cleanup.apply import ApplyResult, apply_plan
from checkpoint.cleanup.plan import GcPlanOptions, plan_gc
from checkpoint.safety import AuditTrail, InPlace, Plan, PlannedFile, taken_at_once
from checkpoint.storage import Storage
from tests.support.paths import PROJECT

# The trails of plans made without one, in one folder removed when the worker exits: one folder
# each, left in the system's temporary folder, came to 72 a run.
_TRAILS = tempfile.TemporaryDirectory(prefix="ckpt-audit-")
# The test clock: seven hours from now, so every corpus file is past the default 6 h grace.
LATER = 7 * 3600


def plan_of(where: Path | str | Storage, audit: AuditTrail | None = None, **kwargs: Any) -> Plan:
    """Planned as for a query known to be stopped (the corpus' are), unless told otherwise: the
    quiet period alone then decides which rules apply, as the scenarios expect."""
    kwargs.setdefault("query_stopped", True)
    storage = where if isinstance(where, Storage) else Storage(str(where))
    trail = audit or AuditTrail(tempfile.mkdtemp(dir=_TRAILS.name))
    return plan_gc(InPlace(storage, taken_at_once("tests"), trail), GcPlanOptions(**kwargs))


def plan_later(where: Path | str | Storage, **kwargs: Any) -> Plan:
    """Planned seven hours from now (`LATER`)."""
    return plan_of(where, now=time.time() + LATER, **kwargs)


def candidates_of(plan: Plan, audit: AuditTrail | None = None) -> list[PlannedFile]:
    """Every candidate, in manifest order; `audit` for a trail that needs storage options."""
    trail = plan.manifest.rsplit("/", 2)[0]  # <trail>/<checkpoint's folder>/<plan id>.plan.jsonl
    return [c for chunk in (audit or AuditTrail(trail)).candidates(plan) for c in chunk]


def apply_unleased(plan: Plan, storage: Storage, audit: AuditTrail, **kwargs: Any) -> ApplyResult:
    """The apply alone, under no lease: what the tests of its deletions count, without the door's
    lease files (the door is tested through `apply_cleanup`, the CLI and Dagster)."""
    return apply_plan(plan, storage, audit, check=lambda: None, **kwargs)


def manifest_lines(manifest: str, plan_id: str) -> list[bytes]:
    """A local manifest's lines, its plan id masked: two plans of one checkpoint compare equal
    when they planned the same, in the same order."""
    head, *lines = Path(manifest.removeprefix("file://")).read_bytes().splitlines()
    return [head.replace(plan_id.encode(), b"<id>"), *lines]


# A plan in a process of its own (argv: checkpoint, trail, now, "alone" or "with a thread",
# workers or "auto"), two cores to it: the start methods of the worker pools it started, and its
# manifest.
_PLAN_IN_A_FRESH_PROCESS = """
import json, sys, threading, time
from checkpoint.cleanup import plan as gc_plan, pool as planning_pool
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.storage import Storage

started, pool = [], planning_pool.ProcessPoolExecutor
def recording(*args, **kwargs):
    started.append(kwargs["mp_context"].get_start_method())
    return pool(*args, **kwargs)
planning_pool.ProcessPoolExecutor = recording
planning_pool.os.cpu_count = lambda: 2
if sys.argv[4] == "with a thread":
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
workers = None if sys.argv[5] == "auto" else int(sys.argv[5])
request = InPlace(Storage(sys.argv[1]), taken_at_once("tests"), AuditTrail(sys.argv[2]))
options = gc_plan.GcPlanOptions(now=float(sys.argv[3]), workers=workers, query_stopped=True)
plan = gc_plan.plan_gc(request, options)
print(json.dumps({"started": started, "manifest": plan.manifest, "plan_id": plan.plan_id}))
"""


def planned_in_a_fresh_process(
    path: Path, audit: Path, now: float, *, with_thread: bool, workers: int | None
) -> dict[str, Any]:
    """A plan made in a new interpreter, beside another thread or alone (workers are forked only
    from a process without one); `workers` None: as the plan chooses. Returns `started` (each
    pool's start method), `manifest` and `plan_id`."""
    args = [
        str(path),
        str(audit),
        str(now),
        "with a thread" if with_thread else "alone",
        "auto" if workers is None else str(workers),
    ]
    command = [sys.executable, "-c", _PLAN_IN_A_FRESH_PROCESS, *args]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=PROJECT)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)
