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

from checkpoint.storage.files import FileInfo, Folder, folder_marker, mtime_of
from checkpoint.storage.generic import PreconditionBackend


class GCSBackend(PreconditionBackend):
    def ls(self, top: str, prefix: str) -> Folder:
        """One listing of `<top>/` with `/` as delimiter (page by page): gcsfs' `ls` asks for the
        name as an object too when nothing is under it (an idle look at a removed checkpoint was
        a listing and a GET). A folder's marker is a folder, never a file."""
        from fsspec.asyn import sync

        bucket, inside = top.split("/", 1)[0], f"{top}/"
        try:
            objects, prefixes = sync(self.fs.loop, self.fs._do_list_objects, top, delimiter="/")
        except FileNotFoundError:  # no such bucket
            return Folder((), (), False)
        folders = {f"{bucket}/{p}".rstrip("/")[len(prefix) :] for p in prefixes}
        files, marked = [], False
        for info in objects:
            name = info["name"]
            if name == inside:  # the folder's own marker
                marked = True
            elif name.startswith(inside):
                files.append(FileInfo(name[len(prefix) :], int(info.get("size") or 0), mtime_of(info)))
        files.sort(key=lambda f: f.rel)
        return Folder(tuple(files), tuple(sorted(folders)), bool(files or folders or marked))

    def _tree(self, top: str) -> list[tuple[str, bool]]:
        """Spark's GCS connector makes a folder by writing an empty object named `<folder>/`. One
        flat listing of `<top>/`: called once the files are gone, it holds little. (gcsfs' `find`
        would list the bare prefix `<top>` when nothing is under `<top>/`: every neighbour's
        objects, `<top>-live/...` and all.)"""
        from fsspec.asyn import sync

        found, _ = sync(self.fs.loop, self.fs._do_list_objects, top, delimiter="")
        return [(info["name"], folder_marker(info["name"], int(info.get("size") or 0)))
                for info in found if info["name"].startswith(f"{top}/")]  # fmt: skip

    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None:
        """One GET of the object's metadata: gcsfs' `info` adds a listing of the name as a folder
        (and, missing, more), two to four requests where a stat needs one."""
        from fsspec.asyn import sync

        bucket, key, _ = self.fs.split_path(path)
        try:
            meta = sync(self.fs.loop, self.fs._call, "GET", "b/{}/o/{}", bucket, key, json_out=True)
        except FileNotFoundError:
            return None
        return FileInfo(rel, int(meta.get("size") or 0), mtime_of(meta))
