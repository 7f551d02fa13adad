"""What the model says: findings (`validate`), the documents `--json` and Dagster show
(`report`), the fleet's ranking (`fleet`), and which Spark wrote a store (`generation`)."""

from checkpoint.analysis.generation import PROVEN_SPARKS, unproven_writer
from checkpoint.analysis.validate import Finding, Severity, Validation, ValidationOptions, validate

__all__ = ["PROVEN_SPARKS", "Finding", "Severity", "Validation", "ValidationOptions", "unproven_writer",
           "validate"]  # fmt: skip
