"""One writing action per checkpoint at a time (`lease`), the doors of the actions (`door`: a
checkpoint changed in place, or written from another with the overlap refused and both leases),
and where a checkpoint's own records live (`naming`). It sits below the model: it needs storage
and names, nothing of a checkpoint."""

from checkpoint.errors import LeaseHeld, LeaseLost
from checkpoint.safety.door import (
    EachInPlace,
    Held,
    InPlace,
    TakeLease,
    TwoSided,
    held_by,
    refuse_overlap,
    taken_at_once,
)
from checkpoint.safety.lease import Lease, lease_for
from checkpoint.safety.naming import folder_name

__all__ = ["EachInPlace", "Held", "InPlace", "Lease", "LeaseHeld", "LeaseLost", "TakeLease", "TwoSided",
           "folder_name", "held_by", "lease_for", "refuse_overlap", "taken_at_once"]  # fmt: skip
