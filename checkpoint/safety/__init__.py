"""One writing action per checkpoint at a time (`lease`), the door of an action that writes one
checkpoint from another (`door`: the overlap refused, both leases), and where a checkpoint's own
records live (`naming`). It sits below the model: it needs storage and names, nothing of a
checkpoint."""

from checkpoint.errors import LeaseHeld, LeaseLost
from checkpoint.safety.door import Request, TakeLease, refuse_overlap, taken_at_once
from checkpoint.safety.lease import Lease, lease_for
from checkpoint.safety.naming import folder_name

__all__ = ["Lease", "LeaseHeld", "LeaseLost", "Request", "TakeLease", "folder_name", "lease_for",
           "refuse_overlap", "taken_at_once"]  # fmt: skip
