"""Azure Blob Storage (and ADLS Gen2 through its blob endpoint) through adlfs.

What the shared `PreconditionBackend` relies on, as Blob Storage does it:
- create-if-absent: `Put Blob` or `Put Block List` with `If-None-Match: *` (adlfs' `mode="create"`,
  its `overwrite=False`); the store answers 409 and adlfs raises FileExistsError. A blob of several
  blocks is checked when its block list is committed;
- server-side copy: `Copy Blob` within one account completes before it answers;
- deletes: one `Delete Blob` a file. Blob Batch would take 256 a request, but Azurite refuses the
  batches the SDK sends, so it is not used yet.
"""

from __future__ import annotations

from checkpoint.storage.generic import PreconditionBackend


class AzureBackend(PreconditionBackend):
    pass
