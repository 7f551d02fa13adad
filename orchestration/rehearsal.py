"""The `rehearse_restart` job: will this checkpoint restart under the code and the Spark to be
deployed? Launched from the UI per checkpoint partition.

The query is named from a registry the deployment fixes (CKPT_REHEARSAL_QUERIES, as the roots are
fixed): a run's config picks a name from it, checked by Dagster's config system, and can never name
code, an interpreter or a conf. The op only translates: the rehearsal's flow
(`checkpoint.rehearsal.rehearse`) with the roots' leases and the deployment's Spark, its verdict out
as metadata and as an observation of the checkpoint's inventory.
"""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import json
import os
from dataclasses import dataclass, field

import dagster as dg

from assets.checkpoints import INVENTORY_ASSET, LAST_REHEARSAL, REHEARSAL_BATCH, REHEARSAL_SPARK
from assets.resources import CheckpointRootsResource, SparkResource
from checkpoint.errors import CheckpointError
from checkpoint.policy import POLICY, duration_text, parse_duration
from checkpoint.rehearsal import Rehearsal, RehearsalOptions, rehearse
from checkpoint.safety import InPlace
from orchestration.queue import Kind, run_tags

JOB = "rehearse_restart"
QUERIES_ENV = "CKPT_REHEARSAL_QUERIES"
INVENTORY = dg.AssetKey(INVENTORY_ASSET)


@dataclass(frozen=True)
class RegisteredQuery:
    query: str  # MODULE:FUNCTION, importable where the rehearsal's Spark runs
    python: str | None = None  # another interpreter (another PySpark), or this one
    conf: dict[str, str] = field(default_factory=dict)  # what the deployment sets on its session
    timeout: str = duration_text(POLICY.rehearsal_timeout_seconds)  # the rehearsal's time limit


def queries_from_env() -> dict[str, RegisteredQuery]:
    """CKPT_REHEARSAL_QUERIES: a JSON object, name -> "MODULE:FUNCTION" or {"query", "python",
    "conf", "timeout"}. Unset: no rehearsal job."""
    raw = os.environ.get(QUERIES_ENV)
    if not raw:
        return {}
    try:
        entries = json.loads(raw)
        if not isinstance(entries, dict):
            raise TypeError("not a JSON object")
        found = {str(name): RegisteredQuery(v) if isinstance(v, str) else RegisteredQuery(**v)
                 for name, v in entries.items()}  # fmt: skip
        for registered in found.values():
            parse_duration(registered.timeout)
        return found
    except (ValueError, TypeError) as exc:
        raise CheckpointError(
            f"{QUERIES_ENV} is not a JSON object of name -> MODULE:FUNCTION: {exc}"
        ) from exc


def rehearsal_metadata(result: Rehearsal) -> dict:
    error = result.error
    stores = "\n".join(
        f"- operator {s.operator} store {s.store}: {s.original_rows:,} rows in the checkpoint, "
        f"{s.rehearsal_rows:,} after the replay; {s.only_original + s.only_rehearsal:,} differ"
        + (f" ({', '.join(s.keys)})" if s.keys else "")
        for s in result.stores
    )
    pinned = "\n".join(f"- `{c.key}` = {c.pinned} (the session has {c.session}): Spark uses {c.pinned}"
                       for c in result.pinned)  # fmt: skip
    return {
        "passed": result.passed,
        "outcome": str(result.outcome),
        "batch": result.batch,
        "spark_version": result.spark_version,
        "condition": (error.condition if error else None) or "",
        "cause": error.cause if error else "",
        "remedy": error.remedy if error else "",
        "inputs_gone": result.input_gone,
        "stores": dg.MetadataValue.md(stores or "(not compared)"),
        "pinned_confs": dg.MetadataValue.md(pinned or "(none differ)"),
        "max_header_fraction": result.max_header_fraction,
        # What the upgrade readiness table said of this Spark before the run (docs/format.md).
        "readiness_table": result.foreseen.label if result.foreseen else "",
        "fork_files": result.fork_files,
        "seconds": dg.MetadataValue.json(result.as_dict()["seconds"]),
    }


def rehearsal_job(queries: dict[str, RegisteredQuery]) -> dg.JobDefinition | None:
    """The job over `queries`, or None when the deployment registers none."""
    if not queries:
        return None
    names = dg.Enum("RegisteredQuery", [dg.EnumValue(name) for name in sorted(queries)])
    schema = {
        "partition": dg.Field(str, description="The checkpoint: its partition key, e.g. prod:team-a/orders"),
        "query": dg.Field(names, description=f"A query the deployment registers ({QUERIES_ENV})"),
        "batch": dg.Field(
            dg.Noneable(int),
            default_value=None,
            is_required=False,
            description="A committed batch to replay; default: the latest committed",
        ),  # fmt: skip
    }

    @dg.op(name="rehearse", config_schema=schema, tags={"kind": "spark"})
    def rehearse_op(context: dg.OpExecutionContext, roots: CheckpointRootsResource, spark: SparkResource):
        """Replays the batch on a scratch fork with the registered query and this deployment's
        Spark, and compares the state; the checkpoint is only read."""
        from jobs.rehearse import in_process, in_python  # Spark only when this op runs

        key, registered = context.op_config["partition"], queries[context.op_config["query"]]
        src = roots.checkpoint_storage(key)
        run = (
            in_python(registered.python, spark.master)
            if registered.python
            else in_process(spark.session, src)
        )
        try:
            request = InPlace(src, lambda storage, what: roots.take_lease_at(context, storage, what, key))
            batch, timeout = context.op_config["batch"], parse_duration(registered.timeout)
            options = RehearsalOptions(
                run, registered.query, batch, dict(registered.conf), timeout_seconds=timeout
            )
            result = rehearse(request, options)
        except CheckpointError as exc:
            raise dg.Failure(description=f"{key}: {exc}") from exc
        metadata = rehearsal_metadata(result)
        # On the checkpoint's own page too: the last rehearsal, when and under which Spark.
        context.log_event(dg.AssetObservation(INVENTORY, partition=key, metadata={
            LAST_REHEARSAL: "passed" if result.passed else f"failed: {result.outcome}",
            REHEARSAL_SPARK: result.spark_version, REHEARSAL_BATCH: result.batch}))  # fmt: skip
        if not result.passed:
            why = f": {result.error.condition}" if result.error and result.error.condition else ""
            raise dg.Failure(
                description=f"{key}: batch {result.batch}: {result.outcome}{why}", metadata=metadata
            )
        return dg.Output(result.as_dict(), metadata=metadata)

    @dg.job(
        name=JOB,
        description="Will it restart? Replay a committed batch of a checkpoint on a scratch fork with a "
        "registered query and this deployment's Spark, and compare the state (read-only; from the Launchpad)",
        tags=run_tags(Kind.REHEARSAL),
    )
    def rehearse_restart():
        rehearse_op()

    return rehearse_restart
