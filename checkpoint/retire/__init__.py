"""Retirement of a dormant checkpoint, in two steps a person runs, never a schedule.

The plan (`plan`) judges the checkpoint dormant from its logs (no commit and no offset for the
dormancy period, no unfinished batch), lists every file it holds, and writes them with that
evidence and the archive it will go to as a manifest in the audit trail (`manifest`).

The plan also writes its record beside the checkpoint (`record`: where its lease lives, whatever
trail the manifest went to): the manifest's sha256, its header's fields, the time it was made.

The apply (`apply`), after a grace period and under the checkpoint's lease (and the archive's),
trusts nothing but the checkpoint as it is now and the plan's own record; the manifest is a
handback a person may have edited, and never widens what is deleted:
1. the manifest matches its record (sha256, header), and the grace has passed since the record's
   time (a finite one, the plan id's; never a file's mtime);
2. every file the checkpoint holds is one the manifest lists, with its size and mtime, and none it
   lists is gone: any commit, offset or file newer than the plan refuses it; it is a checkpoint,
   dormant, with no batch unfinished, holding no other checkpoint and no file Spark never writes;
3. the latest committed batch is forked to the archive (what recovery reads: `ckpt fork ARCHIVE
   DEST` brings the query back), and the archive is read back and validated, by every run that
   deletes, never taken from a record;
4. the files are deleted a batch at a time, through the folders as they were when it began, then
   the folders, the checkpoint's own last.
Each step is recorded in the trail as it ends (`<plan id>.retire-outcomes.jsonl`), and the start of
deletion beside the checkpoint too, so a run killed at any moment is finished by the same apply: the
fork resumes, and once deletion began, what is gone is what an earlier run deleted.
"""

from checkpoint.retire.apply import Retired, RetireOptions, apply_retirement
from checkpoint.retire.manifest import (
    Evidence,
    RetirementPlan,
    file_line,
    manifest_url,
    parse_file_line,
    read_retirement,
)
from checkpoint.retire.plan import RetirementPlanOptions, plan_retirement, retirement_request
from checkpoint.retire.record import PlanRecord

__all__ = [
    "Evidence",
    "PlanRecord",
    "file_line",
    "parse_file_line",
    "RetireOptions",
    "Retired",
    "RetirementPlan",
    "RetirementPlanOptions",
    "apply_retirement",
    "retirement_request",
    "manifest_url",
    "plan_retirement",
    "read_retirement",
]
