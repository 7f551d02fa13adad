"""One writing action per checkpoint at a time (`lease`), the doors of the actions (`door`: a
checkpoint changed in place, or written from another with the overlap refused and both leases),
where a checkpoint's own records live (`naming`), the audit trail that keeps the actions' plans
and records (`trail`; a cleanup plan as it is kept, `manifest`), and where a location really is
(`place`: every inside, outside and overlap question, by resolved place). It sits below the model:
it needs storage, the formats' bounded readers and names, nothing of a checkpoint."""

from checkpoint.errors import LeaseHeld, LeaseLost
from checkpoint.safety.door import (
    EachInPlace,
    Held,
    InPlace,
    TakeLease,
    TwoSided,
    held_by,
    taken_at_once,
)
from checkpoint.safety.lease import Lease, lease_for
from checkpoint.safety.manifest import Plan, PlannedFile, candidate_line, candidate_tail, new_plan_id
from checkpoint.safety.naming import folder_name, own_place
from checkpoint.safety.place import Place, refuse_inside, refuse_overlap
from checkpoint.safety.trail import AuditTrail, parse_held, sha256_of

__all__ = ["AuditTrail", "EachInPlace", "Held", "InPlace", "Lease", "LeaseHeld", "LeaseLost", "Place", "Plan",
           "PlannedFile", "TakeLease", "TwoSided", "candidate_line", "candidate_tail", "folder_name",
           "held_by", "lease_for", "new_plan_id", "own_place", "parse_held", "refuse_inside",
           "refuse_overlap", "sha256_of", "taken_at_once"]  # fmt: skip
