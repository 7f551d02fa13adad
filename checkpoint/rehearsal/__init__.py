"""Will it restart? A rehearsal replays a committed batch of a checkpoint on a scratch fork, under
the code and the Spark to be deployed, and compares the state it ends with to the original's."""

from checkpoint.errors import RehearsalRefused
from checkpoint.rehearsal.flow import RehearsalOptions, SparkRun, job_for, rehearse
from checkpoint.rehearsal.scratch import Scratch
from checkpoint.rehearsal.verdict import (
    CONDITIONS,
    Outcome,
    PinnedConf,
    Rehearsal,
    SparkError,
    StoreComparison,
)

__all__ = ["CONDITIONS", "Outcome", "PinnedConf", "Rehearsal", "RehearsalOptions", "RehearsalRefused",
           "Scratch", "SparkError", "SparkRun", "StoreComparison", "job_for", "rehearse"]  # fmt: skip
