"""Local folders as handles: deletions and removals that go through folders opened one component
at a time without following a link, each held to the identity a plan recorded, so that a folder
swapped for a link (or for another folder) after the plan is never gone through."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable

from checkpoint.storage.regular import NOFOLLOW, where_open

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


class FolderChanged(OSError):
    """A folder on the way to a file is not the one the plan saw: a link, or another folder."""


def folder_ids(full: Callable[[str], str], rels: Iterable[str]) -> dict[str, list[int]]:
    """{rel: [device, inode]} of each folder that is one (not a link): what a delete compares."""
    out = {}
    for rel in rels:
        try:
            st = os.lstat(full(rel))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out[rel] = [st.st_dev, st.st_ino]
    return out


class Folders:
    """Handles on the folders under a root, each opened from its parent's handle without following
    a link (`O_NOFOLLOW` a component), and held to the device and inode the plan recorded or, for
    a folder it did not record, to what it was at its first opening here. A deletion or removal
    then names its file in that handle (`unlinkat`), so a folder made a link, or swapped for
    another, after the plan, even while the deletions run, is never gone through: FolderChanged.
    The root itself is opened by its path (a configured root may be reached through links) and
    held to its real path when first read (`fence`) and to the plan's identity."""

    def __init__(self, root: str, fence: str | None, known: dict[str, list[int]] | None) -> None:
        self.root, self.fence = root, fence
        self.known = {rel: (ids[0], ids[1]) for rel, ids in (known or {}).items()}
        self._open: dict[str, int] = {}

    def __enter__(self) -> Folders:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def _held(self, rel: str, fd: int) -> int:
        st = os.fstat(fd)
        want = self.known.setdefault(rel, (st.st_dev, st.st_ino))
        if (st.st_dev, st.st_ino) != want:
            os.close(fd)
            raise FolderChanged(errno.ESTALE, "not the folder the plan saw (swapped since?): nothing deleted "
                                "in it", rel or self.root)  # fmt: skip
        self._open[rel] = fd
        return fd

    def fd(self, rel: str) -> int:
        """The handle of the folder `rel` ("" the root)."""
        if rel in self._open:
            return self._open[rel]
        if not rel:
            fd = os.open(self.root, _DIR)
            if self.fence is not None and where_open(fd, self.root).rstrip(os.sep) + os.sep != self.fence:
                os.close(fd)
                raise FolderChanged(errno.ESTALE, "the checkpoint's folder moved since it was read: nothing "
                                    "deleted", self.root)  # fmt: skip
            return self._held(rel, fd)
        parent, _, name = rel.rpartition("/")
        try:
            fd = os.open(name, _DIR | NOFOLLOW, dir_fd=self.fd(parent))
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise FolderChanged(errno.ESTALE, "a link or a file where the plan saw a folder: nothing "
                                    "deleted in it", rel) from exc  # fmt: skip
            raise
        return self._held(rel, fd)


def delete_under(
    root: str, fence: str | None, rels: list[str], known: dict[str, list[int]] | None
) -> dict[str, str]:
    """Deletes files named relative to `root` through `Folders`; {rel: why} of those not deleted.
    A file already gone counts as deleted; one still there after its unlink is reported."""
    errors: dict[str, str] = {}
    with Folders(root, fence, known) as folders:
        for rel in rels:
            folder, _, name = rel.rpartition("/")
            try:
                fd = folders.fd(folder)
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                try:
                    os.stat(name, dir_fd=fd, follow_symlinks=False)
                    errors[rel] = "still present after the delete"
                except FileNotFoundError:
                    pass
            except FileNotFoundError:
                continue  # its folder is gone, and so the file
            except FolderChanged as exc:
                errors[rel] = f"{exc.filename}: {exc.strerror}"
            except OSError as exc:
                errors[rel] = f"{type(exc).__name__}: {exc}"
    return errors


def remove_empty_under(root: str, fence: str | None, rels: Iterable[str]) -> None:
    """Each folder that holds nothing, deepest first, and its emptied parents up to the root, each
    removed through its parent's handle (`Folders`): never a folder reached through a link."""
    with Folders(root, fence, None) as folders:
        for rel in sorted(set(rels), key=lambda r: -r.count("/")):
            while rel:
                parent, _, name = rel.rpartition("/")
                try:
                    os.rmdir(name, dir_fd=folders.fd(parent))
                except OSError:  # not empty, gone, or changed: either way it is not ours to remove
                    break
                rel = parent
