"""One writing action per checkpoint at a time (`lease`), and where a checkpoint's own records
live (`naming`). It sits below the model: it needs storage and names, nothing of a checkpoint."""

from checkpoint.errors import LeaseHeld, LeaseLost
from checkpoint.safety.lease import Lease, both_held, lease_for
from checkpoint.safety.naming import folder_name

__all__ = ["Lease", "LeaseHeld", "LeaseLost", "both_held", "folder_name", "lease_for"]
