"""Fork, relocate and roll back: a new checkpoint holding exactly what recovery at a batch reads."""

from checkpoint.fork.copy import ForkIncomplete, ForkRefused, ForkResult, fork, refuse_overlap

__all__ = ["ForkIncomplete", "ForkRefused", "ForkResult", "fork", "refuse_overlap"]
