"""The state profile of a checkpoint: what each state partition holds, how skewed, and (with
candidate counts configured) what each partition would hold under another count, predicted with
Spark's own hash. Materialised on request (UI), before choosing a `repartition_checkpoint` count."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg
from pydantic import Field

from assets import markdown
from assets.partitions import checkpoint_partitions
from assets.ranges import BATCHED, each_checkpoint, range_table
from assets.resources import CheckpointRootsResource, SparkResource
from checkpoint.analysis import human_bytes
from checkpoint.repartition import head_profile

GROUP = "checkpoint_repartition"
_BAR = 24  # characters of the longest bar


class ProfileConfig(dg.Config):
    candidates: list[int] = Field(
        default_factory=list, description="Partition counts to predict with Spark's hash (none: no Spark)"
    )


def bars(values: list[int]) -> list[str]:
    """A bar per value, the largest `_BAR` characters: a per-partition chart that any Markdown shows."""
    top = max(values, default=0) or 1
    return ["█" * round(_BAR * v / top) for v in values]


@dg.asset(partitions_def=checkpoint_partitions, group_name=GROUP, kinds={"spark"}, backfill_policy=BATCHED)
def checkpoint_state_profile(
    context: dg.AssetExecutionContext,
    config: ProfileConfig,
    roots: CheckpointRootsResource,
    spark: SparkResource,
) -> dg.MaterializeResult:
    """Keys and bytes per state partition, skew, and predicted keys per partition for candidate counts."""

    def profile(key: str) -> dict:
        ckpt = roots.load(key, strict=True)
        doc = head_profile(ckpt)
        if config.candidates:
            from jobs.repartition import predict  # Spark only when counts are predicted

            doc["predicted"] = predict(spark.session(), ckpt, config.candidates)
        return doc

    docs = each_checkpoint(context.partition_keys, profile)
    if len(docs) > 1:
        skew = {key: max((op["skew"]["bytes"] or 0.0 for op in doc["operators"]), default=0.0)
                for key, doc in docs.items()}  # fmt: skip
        rows = {key: (doc["batch"], doc["partitions"], skew[key]) for key, doc in docs.items()}
        summary = range_table(("batch", "partitions", "worst skew (bytes)"), rows)
        return dg.MaterializeResult(metadata={"checkpoints": len(docs), "checkpoints_table": summary})
    (doc,) = docs.values()
    metadata: dict = {"batch": doc["batch"], "partitions": doc["partitions"]}
    for op in doc["operators"]:
        rows = op["partitions"]
        chart = bars([r["bytes"] for r in rows])
        table = markdown.table(
            ("partition", "bytes", "keys", "chart (bytes)"),
            [
                (r["partition"], human_bytes(r["bytes"]), r["keys"], c)
                for r, c in zip(rows, chart, strict=True)
            ],
        )
        metadata[f"operator_{op['operator']}_skew_bytes"] = op["skew"]["bytes"] or 0.0
        metadata[f"operator_{op['operator']}"] = dg.MetadataValue.md(
            f"{op['name']}, largest {op['largest']}\n\n{table}"
        )
    for pred in doc.get("predicted", []):
        counts = {"now": pred["now"], **{n: c["rows"] for n, c in pred["candidates"].items()}}
        lines = [f"self-check: {'ok' if pred['self_check']['ok'] else 'FAILED: do not repartition'}", ""]
        for n, values in counts.items():
            table = markdown.table(
                ("partition", "rows", "chart"),
                [(p, v, c) for p, (v, c) in enumerate(zip(values, bars(values), strict=True))],
            )
            lines += [f"**{n} partitions**", "", table, ""]
        metadata[f"operator_{pred['operator']}_predicted"] = dg.MetadataValue.md("\n".join(lines))
        metadata[f"operator_{pred['operator']}_self_check"] = pred["self_check"]["ok"]
    metadata["profile"] = dg.MetadataValue.json(doc)
    return dg.MaterializeResult(metadata=metadata)
