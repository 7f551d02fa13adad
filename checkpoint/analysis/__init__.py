"""What the model says: the finding codes (`findings`) and the checks that find them (`checks`:
`validate`), what names the stores (`stores`), the documents `--json` and Dagster show
(`report`), the fleet's ranking (`fleet`), which Spark wrote a store (`generation`), and which
Spark can restart a checkpoint (`readiness`)."""

from checkpoint.analysis.checks import (
    CODES,
    Category,
    Finding,
    FindingCode,
    Severity,
    Validation,
    ValidationOptions,
    dormant_since,
    unfinished_batch,
    validate,
    validate_look,
)
from checkpoint.analysis.findings import batch_spans, utc_minute
from checkpoint.analysis.fleet import (
    FleetRow,
    headroom,
    look_at,
    needs_attention,
    ranked,
    shown,
    totals,
    unreadable_row,
    with_held,
)
from checkpoint.analysis.generation import PROVEN_SPARKS, unproven_writer
from checkpoint.analysis.readiness import (
    LINES,
    NO_RULE_PROOF,
    ONE_WAY,
    RULES,
    Facts,
    Readiness,
    readiness_of,
    spark_line,
)
from checkpoint.analysis.report import (
    human_bytes,
    inspect_summary,
    inventory,
    lineage_document,
    printable,
    scan_entry,
    validation_document,
)

__all__ = [
    "CODES",
    "NO_RULE_PROOF",
    "ONE_WAY",
    "Category",
    "Finding",
    "FindingCode",
    "Facts",
    "FleetRow",
    "LINES",
    "PROVEN_SPARKS",
    "RULES",
    "Readiness",
    "Severity",
    "Validation",
    "ValidationOptions",
    "batch_spans",
    "dormant_since",
    "headroom",
    "human_bytes",
    "printable",
    "inspect_summary",
    "inventory",
    "lineage_document",
    "look_at",
    "needs_attention",
    "ranked",
    "readiness_of",
    "shown",
    "spark_line",
    "scan_entry",
    "totals",
    "unfinished_batch",
    "utc_minute",
    "unproven_writer",
    "unreadable_row",
    "with_held",
    "validate",
    "validate_look",
    "validation_document",
]
