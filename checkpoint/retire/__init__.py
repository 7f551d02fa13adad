"""Retirement of a dormant checkpoint, in two steps a person runs, never a schedule.

The plan (`plan`) judges the checkpoint dormant from its logs (no commit and no offset for the
dormancy period, no unfinished batch), lists every file it holds, and writes them with that
evidence and the archive it will go to as a manifest in the audit trail (`manifest`).

The apply (`apply`), after a grace period and under the checkpoint's lease (and the archive's),
trusts nothing but the checkpoint as it is now:
1. the grace has passed since the plan (or since its manifest was last written, if later);
2. every file the checkpoint holds is one the manifest lists, with its size and mtime, and none it
   lists is gone: any commit, offset or file newer than the plan refuses it;
3. the latest committed batch is forked to the archive (what recovery reads: `ckpt fork ARCHIVE
   DEST` brings the query back), and the archive is read back and validated;
4. the files are deleted a batch at a time, through the folders as they were when it began, then
   the folders, the checkpoint's own last.
Each step is recorded in the trail as it ends (`<plan id>.retire-outcomes.jsonl`), so a run
killed at any moment is finished by the same apply: the fork resumes, and once deletion began,
what is gone is what an earlier run deleted.
"""

from checkpoint.retire.apply import Retired, RetireOptions, apply_retirement, retirement_request
from checkpoint.retire.manifest import Evidence, RetirementPlan, manifest_url, read_retirement
from checkpoint.retire.plan import plan_retirement

__all__ = [
    "Evidence",
    "RetireOptions",
    "Retired",
    "RetirementPlan",
    "apply_retirement",
    "retirement_request",
    "manifest_url",
    "plan_retirement",
    "read_retirement",
]
