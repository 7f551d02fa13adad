"""What a TTL has expired in a checkpoint's transformWithState stores, and a check that warns when a
restart would recover much of it (`checkpoint.expiry`): materialised on request (UI, a backfill),
before launching `purge_expired_state`. Each store is read as a recovery of the latest committed
batch reads it, one at a time; nothing is written."""

# No `from __future__ import annotations`: Dagster reads these signatures' annotations at runtime.
import dagster as dg

from assets import markdown
from assets.partitions import checkpoint_partitions
from assets.ranges import BATCHED, PER_CHECKPOINT, each_checkpoint, per_checkpoint, range_table
from assets.resources import CheckpointRootsResource
from checkpoint.analysis import human_bytes
from checkpoint.expiry import expired_report
from checkpoint.policy import POLICY

GROUP = "checkpoint_expiry"
ASSET = "checkpoint_expired_state"
SHARE_CHECK = "expired_share"
# Metadata keys the fleet report reads back (`assets.history`).
EXPIRED, EXPIRED_SHARE, EXPIRED_BYTES = "expired", "expired_share", "expired_bytes"


_SHARE = POLICY.expired_share_warn


@dg.asset(
    name=ASSET,
    partitions_def=checkpoint_partitions,
    group_name=GROUP,
    backfill_policy=BATCHED,
    check_specs=[
        dg.AssetCheckSpec(
            SHARE_CHECK,
            asset=ASSET,
            description=f"At most {_SHARE:.0%} of the entries "
            "with a TTL have expired (else: `purge_expired_state`)",
        )
    ],  # fmt: skip
)
def checkpoint_expired_state(
    context: dg.AssetExecutionContext, roots: CheckpointRootsResource
) -> dg.MaterializeResult:
    """Per transformWithState store at the latest committed batch: its entries with a TTL, those
    expired now, and their bytes."""
    docs = each_checkpoint(
        context.partition_keys, lambda key: expired_report(roots.checkpoint_storage(key)).as_dict()
    )
    over = {key: d["expired_share"] for key, d in docs.items() if d["expired_share"] > _SHARE}
    check = dg.AssetCheckResult(
        check_name=SHARE_CHECK, asset_key=ASSET, passed=not over, severity=dg.AssetCheckSeverity.WARN,
        metadata={"over": len(over), "worst_share": max(over.values(), default=0.0)},
    )  # fmt: skip
    totals = {what: sum(d[what] for d in docs.values()) for what in ("entries", EXPIRED, EXPIRED_BYTES)}
    if len(docs) > 1:
        each = {key: (d["batch"], d["entries"], d["expired"], f"{d['expired_share']:.1%}")
                for key, d in docs.items()}  # fmt: skip
        table = range_table(("batch", "entries", "expired", "share"), each)
        figures = ("entries", EXPIRED, EXPIRED_SHARE, EXPIRED_BYTES)
        own = {key: {k: d[k] for k in figures} for key, d in docs.items()}
        metadata = {"checkpoints": len(docs), **totals, "checkpoints_table": table,
                    PER_CHECKPOINT: per_checkpoint(own)}  # fmt: skip
        return dg.MaterializeResult(metadata=metadata, check_results=[check])
    (doc,) = docs.values()
    rows = [(s["operator"], s["partition"], s["store"], s["entries"], s["expired"],
             human_bytes(s["expired_bytes"])) for s in doc["stores"]]  # fmt: skip
    stores = markdown.table(("operator", "partition", "store", "entries", "expired", "bytes"), rows)
    metadata = {**totals, "batch": -1 if doc["batch"] is None else doc["batch"],
                EXPIRED_SHARE: doc[EXPIRED_SHARE], "as_of_ms": doc["as_of_ms"],
                "stores": dg.MetadataValue.md(stores)}  # fmt: skip
    return dg.MaterializeResult(metadata=metadata, check_results=[check])
