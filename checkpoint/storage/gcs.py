"""Google Cloud Storage through gcsfs.

What the shared `PreconditionBackend` relies on, as GCS does it:
- create-if-absent: an upload with `ifGenerationMatch=0` (gcsfs' `mode="create"`); the store answers
  412, checked when the object is finalised (a resumable upload's last chunk too), and gcsfs
  raises FileExistsError;
- server-side copy: `rewrite`;
- deletes: one `DELETE` a file. The batch endpoint would take 100 a request, but gcsfs does not map
  its answer back to the files and no emulator serves it, so it is not used yet.
"""

from __future__ import annotations

from typing import BinaryIO

from checkpoint.storage.generic import PreconditionBackend


class GCSBackend(PreconditionBackend):
    def open(self, path: str, block_size: int | None, size: int | None, fence: str | None = None) -> BinaryIO:
        f = self.fs.open(path, "rb", block_size=block_size, **({} if size is None else {"size": size}))
        if size is not None:
            # gcsfs asks for the object's details at the first read unless it holds them; its
            # `details` is a read-only property over `_details` (the generic backend's setting of
            # `details` fails there). The size is all a read needs.
            f._details = {"name": path, "size": size, "type": "file"}
        return f
