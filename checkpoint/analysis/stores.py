"""What names the stores, cross-checked: operator metadata, each batch's offsets, commit ids and the
state folders. In format V1 only the operator metadata names an operator's stores, and a forged
`numPartitions` once made cleanup take whole partitions for orphans (docs/safety.md)."""

from __future__ import annotations

from collections.abc import Iterable

from checkpoint.analysis.findings import F, Finding, batch_spans, finding
from checkpoint.model import Checkpoint, StateFolders, state_partitions


def store_findings(ckpt: Checkpoint, latest: int) -> Iterable[Finding]:
    """What names the stores (metadata, offsets, commit ids, folders) agrees; in V1 only metadata does."""
    entry = ckpt.batches[latest]
    for op in ckpt.operators.values():
        count = state_partitions(ckpt, op, latest)
        # A run's first batch writes the metadata, Spark's repartitioning leaves it: some batch's count.
        counts = {state_partitions(ckpt, op, b) for b in ckpt.batches}
        declared = sorted({s.num_partitions for s in op.metadata.stores}) if op.metadata else []
        if declared and (len(declared) > 1 or declared[0] not in counts):
            yield finding(
                F.STORES_DISAGREE,
                ckpt.storage.full(f"state/{op.id}/_metadata"),
                f"operator {op.id}'s metadata declares {_listed(declared)} partition(s), and no batch in the "
                f"logs has that many (batch {latest} has {count}: its offsets' "
                "spark.sql.shuffle.partitions or commit ids)",
            )
        ids = None if entry.commit is None else (entry.commit.state_unique_ids or {}).get(op.id)
        widths = sorted({len(p) for p in ids or ()})
        if widths and widths != [len(op.store_names)]:
            yield finding(
                F.STORES_DISAGREE,
                ckpt.storage.full(f"commits/{latest}"),
                f"operator {op.id} has {len(op.store_names)} store(s) ({_listed(op.store_names)}) and "
                f"commits/{latest} names {_listed(widths)} id(s) a partition",
            )
        seen = ckpt.state_folders.get(op.id) or StateFolders()
        if seen.partitions is not None and len(seen.partitions) < count:
            yield finding(
                F.STORES_DISAGREE,
                ckpt.storage.full(f"state/{op.id}"),
                f"batch {latest} has {count:,} partitions of operator {op.id}, and state/{op.id} holds "
                f"{len(seen.partitions)} partition folder(s): Spark writes one for each",
            )
        unnamed = sorted((seen.stores or frozenset()) - set(op.store_names))
        if unnamed:
            yield finding(
                F.STORES_DISAGREE,
                ckpt.storage.full(f"state/{op.id}"),
                f"operator {op.id} has store folder(s) {_listed(unnamed)} that its metadata does not name "
                f"(it names {_listed(op.store_names)})",
            )
        ever = max(counts)  # the most partitions any batch has: a folder at or above it, nothing names
        beyond = {p for p in seen.partitions or () if p >= ever}
        if beyond:
            yield finding(
                F.UNNAMED_STATE_FOLDER,
                ckpt.storage.full(f"state/{op.id}"),
                f"operator {op.id} has partition folder(s) {batch_spans(beyond)}, and no batch in the logs "
                f"has more than {ever} partitions: they are kept, not cleaned",
            )


def _listed(values: Iterable[object]) -> str:
    return ", ".join(map(str, values))
