"""The run queue's rule, set by the product, not by hand: every run the code location defines or
asks for carries its kind, a priority, and, when it compacts or audits in bulk, a tag the
instance's run queue limits (`tag_concurrency_limits` in dagster.yaml: one compacting run at a
time, and one bulk audit).

A run held by such a limit waits in the queue, not in a run slot, so compactions never fill the
slots that validation, the fleet report and what people launch from the UI need; and the queue
starts the higher priorities first whenever a slot frees (Dagster's `dagster/priority`). A bulk
audit (discovery's or the audit schedule's runs of 500 checkpoints) is Python work that a core
bounds: 20 of them for a fleet of 10,000 once took all 8 slots for 12 minutes, side by side on 2
cores, while the due compactions waited behind them. One at a time they take as long in all, and
leave the slots and the other core to compaction and to what people launch.
"""

from __future__ import annotations

from enum import Enum

KIND_TAG = "ckpt/kind"
COMPACTS_TAG = "ckpt/compacts"  # limited to 1 running run in dagster.yaml
BULK_TAG = "ckpt/bulk"  # the same: discovery's and the audit schedule's validation runs
PRIORITY_TAG = "dagster/priority"


class Kind(Enum):
    """A run's kind, with its priority (higher starts first) and whether it runs compaction."""

    VALIDATION = ("validation", 20, False)  # discovery's, the commit sensor's, the audit schedule's
    REPORT = ("report", 20, False)  # the fleet report
    # What a person launches from the UI
    AUDIT = ("audit", 10, False)
    CLEANUP = ("cleanup", 10, False)
    FORK = ("fork", 10, False)
    REPARTITION = ("repartition", 10, False)
    MIGRATE = ("migrate", 10, False)
    REHEARSAL = ("rehearsal", 10, False)
    RETIRE = ("retire", 10, False)
    PURGE = ("purge", 10, False)
    COMPACTION = ("compaction", 0, True)  # the commit sensor's batched compactions
    MAINTENANCE = ("maintenance", -10, True)  # the schedules' full passes

    def __init__(self, label: str, priority: int, compacts: bool):
        self.label, self.priority, self.compacts = label, priority, compacts


def run_tags(kind: Kind) -> dict[str, str]:
    tags = {KIND_TAG: kind.label, PRIORITY_TAG: str(kind.priority)}
    if kind.compacts:
        tags[COMPACTS_TAG] = "true"
    return tags
