"""Fork, relocate and roll back: a new checkpoint holding exactly what recovery at a batch reads."""

from checkpoint.errors import ForkIncomplete, ForkRefused
from checkpoint.fork.copy import fork, refuse_overlap
from checkpoint.fork.markers import ForkResult

__all__ = ["ForkIncomplete", "ForkRefused", "ForkResult", "fork", "refuse_overlap"]
