"""Discovery: keeps one partition per checkpoint found under the configured roots."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import hashlib
import os
import time
from collections.abc import Callable

import dagster as dg
from dagster import DagsterRunStatus

from assets.partitions import CHECKPOINTS, checkpoint_partitions, root_of
from assets.resources import CheckpointRootsResource
from checkpoint.errors import CheckpointError, CompactionDeferred, CompactionRefused
from checkpoint.model import Logs, newest_commit, within_deadline
from checkpoint.policy import POLICY, duration_text, parse_duration
from checkpoint.storage import Storage
from orchestration.due import Caps, Look, SensorState, lists_dormant, looking_order, plan_tick, resume_at
from orchestration.jobs import maintain_checkpoints_job, validate_checkpoints_job
from orchestration.maintenance import batched, maintenance_request
from orchestration.queue import BULK_TAG, COMPACTS_TAG, KIND_TAG, Kind
from orchestration.validation import validation_request

# How often the daemon looks for new commits; tests and busy fleets set it through the environment.
COMMIT_SENSOR_INTERVAL = int(os.environ.get("CKPT_COMMIT_SENSOR_INTERVAL", POLICY.sensor_interval_seconds))
# How long a tick looks at checkpoints: Dagster kills a tick at 60 s, and a killed tick saves no
# cursor. The checkpoints not reached are looked at first by the next tick.
COMMIT_SENSOR_BUDGET = float(os.environ.get("CKPT_COMMIT_SENSOR_BUDGET", POLICY.sensor_tick_budget_seconds))
# Discovery audits new checkpoints in batched runs, at most so many a tick: a fleet of 10,000
# found at once is 20 runs of 500, not 10,000 runs.
DISCOVERY_MAX_RUNS = int(os.environ.get("CKPT_DISCOVERY_MAX_RUNS", POLICY.discovery_max_runs_per_tick))
# Checkpoints looked at side by side in one tick: an idle look is one LIST round trip on S3, so
# 1,000 checkpoints take about 1000 / 32 round trips.
COMMIT_SENSOR_WORKERS = int(os.environ.get("CKPT_COMMIT_SENSOR_WORKERS", POLICY.sensor_workers))


# A look that has not answered in this long is abandoned (a hung NFS read, a storage that stalls):
# the tick reports it and goes on.
COMMIT_SENSOR_LOOK_TIMEOUT = float(
    os.environ.get("CKPT_COMMIT_SENSOR_LOOK_TIMEOUT", POLICY.look_timeout_seconds)
)


@dg.sensor(
    job=validate_checkpoints_job,
    minimum_interval_seconds=int(POLICY.discovery_interval_seconds),
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def checkpoint_discovery_sensor(context: dg.SensorEvaluationContext, roots: CheckpointRootsResource):
    """Adds new checkpoints (and audits them), removes vanished ones.

    A root whose listing fails keeps its partitions: an outage must not look like deleted queries.
    Requests are computed against the instance's partitions, so a repeated tick requests nothing;
    the cursor is a digest of the discovered set, which shows in the UI when discovery changed.
    """
    existing = set(context.instance.get_dynamic_partitions(CHECKPOINTS))
    configured = {root.name for root in roots.roots}
    found: set[str] = set()
    listed: set[str] = set()
    for root in roots.roots:
        try:
            found |= set(roots.discover(root.name))
            listed.add(root.name)
        except CheckpointError as exc:
            context.log.warning(f"root {root.name!r} could not be listed, its partitions are kept: {exc}")
    ours = {key for key in existing - found if root_of(key) is not None}  # one added by hand stays
    vanished = {key for key in ours if root_of(key) in listed or root_of(key) not in configured}
    # A fleet onboarded at once is audited in batched runs, as many as a tick may ask for; the
    # checkpoints beyond them are added, in order, by the next ticks (found again, still new): the
    # backlog lives in the roots, not in the cursor.
    new = sorted(found - existing)
    size = max(1, POLICY.validation_run_max_checkpoints)
    added = new[: size * DISCOVERY_MAX_RUNS]
    runs = batched(added, size)
    cursor = hashlib.sha256("\n".join(sorted(found)).encode()).hexdigest()[:16]
    if not added and not vanished:
        where = f"{len(found)} checkpoints under {len(listed)} root(s)"
        if context.cursor == cursor:
            return dg.SkipReason(f"{where}; none new or vanished")
        # The cursor is not this set's: a tick added partitions and did not end (its audit runs
        # never asked for), or a "Test sensor" dry run added them. Those that no run audited, or is
        # auditing, are asked for again.
        unaudited = sorted(found - _audited(context.instance, _queue(context.instance)[2]))
        if not unaudited:
            context.update_cursor(cursor)
            return dg.SkipReason(f"{where}; none new or vanished, none unaudited")
        runs = batched(unaudited[: size * DISCOVERY_MAX_RUNS], size)
        context.log.info(f"{where}, none new; {len(unaudited)} never audited, in {len(runs)} run(s)")
        return dg.SensorResult(run_requests=_audits(runs), cursor=cursor)
    requests: list[dg.DeleteDynamicPartitionsRequest] = []
    if added:
        # Added here, in one statement, not asked of the daemon: it asks the instance whether each
        # key exists, one query a key, and 10,000 new checkpoints took it 129 s on Postgres, before
        # the tick's audit runs were even submitted. The runs the tick asks for find them there; a
        # tick that fails after this leaves its cursor behind, and the next asks for them again.
        context.instance.add_dynamic_partitions(CHECKPOINTS, added)
    if vanished:
        requests.append(checkpoint_partitions.build_delete_request(sorted(vanished)))
    context.log.info(f"{len(found)} checkpoint(s) under {len(listed)} root(s): {len(added)} new, audited in "
                     f"{len(runs)} run(s); {len(vanished)} vanished")  # fmt: skip
    if len(new) > len(added):
        context.log.info(f"{len(new) - len(added)} new checkpoint(s) wait for the next ticks: {len(added)} "
                         f"added and audited in {len(runs)} run(s) this tick")  # fmt: skip
    return dg.SensorResult(
        run_requests=_audits(runs),
        dynamic_partitions_requests=requests,
        cursor=cursor,
    )


# Settings of the commit sensor, from the environment where a deployment sets them (default: Policy).
SENSOR_CAPS = Caps(
    max_runs_per_tick=int(os.environ.get("CKPT_COMMIT_SENSOR_MAX_RUNS", POLICY.sensor_max_runs_per_tick)),
    max_queued_per_job=int(os.environ.get("CKPT_COMMIT_SENSOR_MAX_QUEUED", POLICY.sensor_max_queued_per_job)),
    validation_period_seconds=parse_duration(
        os.environ.get("CKPT_VALIDATION_PERIOD", duration_text(POLICY.validation_period_seconds))
    ),
    max_per_validation_run=POLICY.validation_run_max_checkpoints,
    max_per_compaction_run=int(
        os.environ.get("CKPT_COMPACTION_RUN_MAX_CHECKPOINTS", POLICY.compaction_run_max_checkpoints)
    ),
    compaction_gather_seconds=parse_duration(
        os.environ.get("CKPT_COMPACTION_GATHER", duration_text(POLICY.compaction_gather_seconds))
    ),
    dormant_look_seconds=parse_duration(
        os.environ.get("CKPT_DORMANT_LOOK_INTERVAL", duration_text(POLICY.dormant_look_seconds))
    ),
    dormant_list_seconds=parse_duration(
        os.environ.get("CKPT_DORMANT_LIST_INTERVAL", duration_text(POLICY.dormant_list_seconds))
    ),
)
_WAITING = (DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED)
_IN_FLIGHT = (*_WAITING, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED)


def _audits(runs: list[list[str]]) -> list[dg.RunRequest]:
    """Discovery's bulk audits; a run's key names its checkpoints, so one asked for twice runs once."""
    return [validation_request(run, "discovered", bulk=True) for run in runs]


def _look(
    roots: CheckpointRootsResource,
    key: str,
    seen: int | None,
    storages: dict[str, Storage],
    quiet_since: float,
    listing: bool = True,
) -> Look:
    """One checkpoint: idle, one shallow listing of `commits/`, which also says whether it is
    dormant (its newest commit written before `quiet_since`); a new commit adds the head-first
    reads of the two newest batches and the compaction asset's own plan of them. Without
    `listing` (a dormant one between its listings), one stat of the commit after `seen` first: the
    listing only when it is there. `storages` are the roots', opened once a tick: a checkpoint's
    is a child of its root's, sharing its client."""
    try:
        storage = roots.site(key, storages).storage
        if not listing and seen is not None and storage.stat(f"commits/{seen + 1}") is None:
            return Look(seen, dormant=True)
        latest, written = newest_commit(storage)
        if latest is None or latest == seen:
            return Look(latest, dormant=written is not None and written <= quiet_since)
        # Of the logs what a restart reads; a refusal is told from every retained one, as the
        # compaction run reads them (an older batch may explain what the newest alone cannot).
        for logs in (Logs.RECOVERY, Logs.ALL):
            try:
                targets = roots.compaction_plan(roots.load(key, recent=2, logs=logs)).targets
                return Look(latest, new=True, crossing=bool(targets))
            except CompactionDeferred:  # a running V1 query: the maintenance schedule compacts it stopped
                return Look(latest, new=True)
            except CompactionRefused:
                continue
        return Look(latest, new=True, error=True)  # refused on every retained log too
    except (CheckpointError, ValueError) as exc:
        return Look(None, problem=str(exc))


def look_within(
    order: list[str],
    look: Callable[[str], Look],
    budget: float,
    workers: int,
    clock: Callable[[], float] = time.monotonic,
    look_timeout: float = COMMIT_SENSOR_LOOK_TIMEOUT,
) -> dict[str, Look]:
    """Looks at checkpoints in `order`, `workers` at a time, starting no look once `budget`
    seconds have passed (nor one that the looks answered so far say the budget would cut:
    `within_deadline`), and giving up on a look that storage has not answered for `look_timeout`
    (a hung NFS read, a storage that stalls), or that has run that long once the budget is spent:
    it is abandoned in its thread, a daemon one that cannot hold the process, sends no further
    request, and is reported as a problem. The looks made are a prefix of `order`, so the next
    tick goes on past an abandoned one, and the tick ends within the budget and one look's
    timeout, whatever the fleet's size and whatever a checkpoint holds."""

    def timed_out(_: str, t: float) -> Look:
        return Look(None, problem=f"look timed out after {t:g} s: skipped this tick")

    done = within_deadline(order, look, budget, workers, clock, look_timeout, timed_out)
    return {order[i]: found for i, found in done.items()}


def _partitions_of(run: dg.DagsterRun) -> list[str]:
    """The checkpoints a run works on: its partition, or the batch its config names."""
    if "dagster/partition" in run.tags:
        return [run.tags["dagster/partition"]]
    for op in ("maintain_each", "validate_each"):
        found: object = run.run_config
        for name in ("ops", op, "config", "partitions"):  # a run's config is input: any shape
            found = found.get(name) if isinstance(found, dict) else None
        if isinstance(found, list):
            return [k for k in found if isinstance(k, str)]
    return []


def _queue(instance: dg.DagsterInstance) -> tuple[dict[str, int], set[str], set[str]]:
    """Runs waiting in the queue per kind the sensor asks for; the partitions whose compaction is
    queued or running (any run that compacts: the sensor's, a schedule's, one from the UI); and
    those whose validation is."""

    def count(tags: dict[str, str]) -> int:
        return instance.get_runs_count(dg.RunsFilter(tags=tags, statuses=list(_WAITING)))

    # Bulk audits wait behind their limit of one (19 of an audit tick's 20): the room they would
    # take is the sensor's own, for checkpoints that just wrote or showed an error.
    bulk = count({KIND_TAG: Kind.VALIDATION.label, BULK_TAG: "true"})
    waiting = {"compact": count({KIND_TAG: Kind.COMPACTION.label}),
               "validate": count({KIND_TAG: Kind.VALIDATION.label}) - bulk}  # fmt: skip

    def in_flight(tags: dict[str, str]) -> set[str]:
        runs = instance.get_runs(dg.RunsFilter(tags=tags, statuses=list(_IN_FLIGHT)))
        return {key for run in runs for key in _partitions_of(run)}

    return waiting, in_flight({COMPACTS_TAG: "true"}), in_flight({KIND_TAG: Kind.VALIDATION.label})


def _audited(instance: dg.DagsterInstance, validating: set[str]) -> set[str]:
    """The partitions audited already, or being audited: one query, made only in a tick that sees
    a checkpoint for the first time."""
    return validating | instance.get_materialized_partitions(dg.AssetKey("checkpoint_lineage_report"))


@dg.sensor(
    jobs=[maintain_checkpoints_job, validate_checkpoints_job],
    minimum_interval_seconds=COMMIT_SENSOR_INTERVAL,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def checkpoint_commit_sensor(context: dg.SensorEvaluationContext, roots: CheckpointRootsResource):
    """Asks for runs only for work that is due (orchestration/due.py): compaction when a new commit's
    plan crosses the threshold or nears the cap, in batched `maintain_checkpoints` runs (cleanup
    off), never twice for a checkpoint and oldest crossing first; validation in batched runs, at
    most once per period per checkpoint or at once on an error, and not again for a checkpoint
    discovery audited. Never more runs than the tick's cap, nor than the queue has room for; what
    waits is kept in the cursor and named in the tick's log line and skip reason."""
    keys = context.instance.get_dynamic_partitions(CHECKPOINTS)
    before, unread = SensorState.read(context.cursor, time.time())
    if unread is not None:
        context.log.warning(unread)
    now = time.time()
    order = looking_order(keys, before, now, SENSOR_CAPS.dormant_look_seconds)
    started = time.monotonic()
    storages = roots.opened()
    # Side by side where a look waits on round trips (`Storage.width`).
    workers = max((s.width(COMMIT_SENSOR_WORKERS) for s in storages.values()), default=1)
    quiet_since = now - roots.policy().dormant_seconds
    list_every = SENSOR_CAPS.dormant_list_seconds

    def one(key: str) -> Look:
        listing = lists_dormant(key, before, now, list_every)
        return _look(roots, key, before.seen.get(key), storages, quiet_since, listing)

    looks = look_within(order, one, COMMIT_SENSOR_BUDGET, workers, look_timeout=COMMIT_SENSOR_LOOK_TIMEOUT)
    for key, look in looks.items():
        if look.problem is not None:
            context.log.warning(f"{key}: skipped this tick: {look.problem}")
    if len(looks) < len(order):
        spent, resume = time.monotonic() - started, order[len(looks)]
        context.log.info(f"looked at {len(looks)} of {len(order)} checkpoints in {spent:.1f} s (budget "
                         f"{COMMIT_SENSOR_BUDGET:g} s); the next tick goes on from {resume}")  # fmt: skip
    # The queue caps what is requested: a tick with nothing that could be due does not ask it.
    anything_due = before.crossings or before.unvalidated or any(look.new for look in looks.values())
    queued, compacting, validating = _queue(context.instance) if anything_due else ({}, set(), set())
    first_sight = any(look.new and key not in before.seen for key, look in looks.items())
    audited = _audited(context.instance, validating) if first_sight else set()
    plan = plan_tick(before, looks, time.time(), SENSOR_CAPS, queued, compacting, keys=keys,
                     next_key=resume_at(order, len(looks)), audited=audited)  # fmt: skip
    requests = [_compaction_request(run) for run in plan.compact]
    requests += [validation_request(run, f"validate:{int(time.time())}") for run in plan.validate]
    new = sum(1 for look in looks.values() if look.new)
    problems = sum(1 for look in looks.values() if look.problem is not None)
    context.log.info(
        f"looked at {len(looks)} of {len(keys)} checkpoint(s) ({len(keys) - len(order)} dormant, not due for "
        f"a look): {new} with a new commit, {problems} unreadable; "
        f"asked for {len(plan.compact)} compaction run(s) ({sum(map(len, plan.compact))} checkpoint(s)) and "
        f"{len(plan.validate)} validation run(s) ({sum(map(len, plan.validate))} checkpoint(s))"
        + (f"; {plan.waiting}" if plan.waiting else "")
    )
    cursor = plan.state.to_json()
    if not requests:
        if cursor != context.cursor:
            context.update_cursor(cursor)
        why = plan.waiting or "nothing due"
        return dg.SkipReason(f"{new} new commit(s) in {len(keys)} checkpoint(s); {why}")
    return dg.SensorResult(run_requests=requests, cursor=cursor)


def _compaction_request(run: tuple[tuple[str, int], ...]) -> dg.RunRequest:
    """A batched compaction: validation and compaction of each, no cleanup; the run key names each
    checkpoint at its batch, so a repeated tick asks for it once."""
    named = hashlib.sha256("\n".join(f"{key}@{batch}" for key, batch in run).encode()).hexdigest()[:12]
    return maintenance_request([key for key, _ in run], f"compact:{named}", Kind.COMPACTION, clean=False)
