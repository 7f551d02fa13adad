"""One writing action per checkpoint at a time (`lease`), the doors of the actions (`door`: a
checkpoint changed in place, or written from another with the overlap refused and both leases),
and where a checkpoint's own records live (`naming`). It sits below the model: it needs storage
and names, nothing of a checkpoint."""

from checkpoint.errors import LeaseHeld, LeaseLost
from checkpoint.safety.door import InPlace, Request, TakeLease, refuse_overlap, taken_at_once
from checkpoint.safety.lease import Lease, lease_for
from checkpoint.safety.naming import folder_name

__all__ = ["InPlace", "Lease", "LeaseHeld", "LeaseLost", "Request", "TakeLease", "folder_name", "lease_for",
           "refuse_overlap", "taken_at_once"]  # fmt: skip
