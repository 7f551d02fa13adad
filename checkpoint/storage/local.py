"""Local disks: durable writes (fsync, link into place), case rules, the reads and walks that the
kernel does better than fsspec."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, TypeVar

from checkpoint.errors import NotARegularFileError, OutsideCheckpointError
from checkpoint.storage.files import VANISHED, Calls, FileInfo, Folder, failing
from checkpoint.storage.folders import delete_under, folder_ids, remove_empty_under
from checkpoint.storage.generic import FsspecBackend
from checkpoint.storage.mounts import canonical_path
from checkpoint.storage.regular import fence_of, inside, open_regular, read_regular, where_open

T = TypeVar("T")


def fsync_path(path: str) -> None:
    """Makes a local file's bytes, or a folder's entries, durable: without it a power loss can
    leave a published name whose bytes were never written (a zip listing truncated SSTs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _other_case(name: str) -> str | None:
    """The spelling a disk that ignores case finds `name` under too: its case folding (`ß` is
    `ss`, as a case-folding folder on Linux folds it), or, for a name folded already, its upper
    case; None where the name has no case (`2024`)."""
    other = name.casefold() if name != name.casefold() else name.upper()
    return None if other == name else other


def _finds_in_any_case(folder: str, name: str) -> bool | None:
    """Whether `folder` finds its entry `name` under the other case's spelling too, as the same
    entry (links not followed: a link `data -> Data` is its own entry, not a second spelling); None
    where the name has no case (`2024`)."""
    other = _other_case(name)
    if other is None:
        return None
    try:
        return os.path.samestat(os.lstat(os.path.join(folder, name)), os.lstat(os.path.join(folder, other)))
    except OSError:
        return False


def _tells_case(entry: os.DirEntry) -> bool:
    """An entry that tells how its folder finds names: a folder (a file may have a second name by a
    hard link, `README` and `readme`), whose name folds letter for letter (`straße` is not found as
    `STRASSE` where a disk folds one letter at a time)."""
    try:
        return entry.is_dir(follow_symlinks=False) and len(entry.name.casefold()) == len(entry.name)
    except OSError:
        return False


def _makes_in_any_case(folder: str) -> bool:
    """Whether a name made in `folder` will be found in any case: as the folder finds one of its
    subfolders that has a case (the first few looked at); in a folder with none (empty, dated
    names, or not listable), as its own folder finds it, on the same file system (a folder made in
    one that folds case folds too)."""
    while True:
        try:
            with os.scandir(folder) as entries:
                for _, entry in zip(range(64), entries, strict=False):
                    told = _finds_in_any_case(folder, entry.name) if _tells_case(entry) else None
                    if told is not None:
                        return told
        except OSError:  # a folder one may write to and not list: its own folder tells
            pass
        parent, name = os.path.split(folder)
        if parent == folder or os.stat(parent).st_dev != os.stat(folder).st_dev:
            return False
        told = _finds_in_any_case(parent, name)
        if told is not None:
            return told
        folder = parent


def case_folded(path: str) -> str:
    """`path` (absolute, links resolved) with each name case-folded where the folder that holds it
    finds it in any case (macOS' and Windows' defaults, a case-folding folder on Linux), and as it
    is elsewhere: so two spellings of one folder are one place, and the place is a spelling the disk
    finds, folder by folder (a volume that ignores case mounted on one that keeps it folds below its
    mount point only). The names not made yet fold as their nearest existing folder makes names, so
    a folder's place is the same before and after it is made."""
    found, out = "/", []
    made: bool | None = None  # past the part that exists: whether its last folder ignores case
    for name in (n for n in path.split("/") if n):
        here = os.path.join(found, name)
        if made is None and not os.path.lexists(here):
            made = _makes_in_any_case(found)
        folds = made if made is not None else _finds_in_any_case(found, name)
        out.append(name.casefold() if folds else name)
        found = here
    return "/" + "/".join(out)


def renamed(path: str, target: str) -> bool:
    """`path` renamed to `target`; False when they are on two file systems (the caller copies)."""
    try:
        os.replace(path, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        return False
    return True


def link_into_place(target: str, temp_prefix: str, fill: Callable[[str], Any]) -> Any:
    """Local disk: `fill` writes a temp file `<temp_prefix><name>.<hex>.tmp` beside the target (a
    name cleanup recognises, should a crash leave it), which is fsynced and then hard-linked into
    place, and the folder fsynced. The link fails if the target exists, so nothing is overwritten
    and no partial file ever carries the real name, not even after a power loss. Returns what
    `fill` returned."""
    folder, name = os.path.split(target)
    os.makedirs(folder, exist_ok=True)
    if os.path.lexists(target):
        raise FileExistsError(target)
    temp = os.path.join(folder, f"{temp_prefix}{name}.{uuid.uuid4().hex}.tmp")
    try:
        got = fill(temp)
        fsync_path(temp)
        os.link(temp, target)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)
    fsync_path(folder)
    return got


FADVISE = hasattr(os, "posix_fadvise")  # Linux and most Unixes; not macOS


def local_heads(paths: list[str], ends: list[int], fence: str | None = None) -> list[bytes]:
    """The first `ends[i]` bytes of each local file, as `cat_ranges` reads them on S3 (the listed
    size bounds each): every file opened and hinted to the kernel first (`posix_fadvise`), so that
    on a cold page cache their disk reads overlap (a lineage header cost a round trip, 90 µs, read
    in turn, and 20 µs a hundred at a time), then each read with one `pread`. Plain descriptors,
    not Python file objects: open, hint, read and close are the four system calls, where `open`
    adds a stat, a tty check and a seek, and a second open for the hint (`open_regular` adds a
    stat and a readlink). A file that cannot be opened or read raises, and every file opened is
    closed."""
    opened: list[int] = []
    try:
        for full, n in zip(paths, ends, strict=True):
            try:
                opened.append(open_regular(full, fence))
            except OSError:
                with failing("read", full, vanished=VANISHED):
                    raise
            if FADVISE:
                os.posix_fadvise(opened[-1], 0, n, os.POSIX_FADV_WILLNEED)
        return [pread_all(fd, n, full) for fd, n, full in zip(opened, ends, paths, strict=True)]
    finally:
        for fd in opened:
            os.close(fd)


def pread_all(fd: int, n: int, full: str) -> bytes:
    """The first `n` bytes of an open file, or all of it when shorter."""
    try:
        data = os.pread(fd, n, 0)
        while len(data) < n:
            more = os.pread(fd, n - len(data), len(data))
            if not more:
                break
            data += more
    except OSError:
        with failing("read", full):
            raise
    return data


def _file_of(entry: os.DirEntry, path: str, cut: int) -> FileInfo:
    """A listed entry at `path` that is not a folder, as fsspec's local listing sees it: a symlink
    is a file, never followed, sized as its target (0 when the target is gone); a FIFO, a device or
    a socket is `special`. FileNotFoundError when the entry vanished since the folder was read."""
    st = entry.stat(follow_symlinks=False)
    link = entry.is_symlink()
    size = st.st_size
    if link:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
    return FileInfo(path[cut:], size, st.st_mtime, link, not link and not stat.S_ISREG(st.st_mode))


def _open_folder(path: str, real: str | None) -> int:
    """A descriptor of the folder at `path`: NotADirectoryError or FileNotFoundError when it is not
    one, or is gone. With `real`, the opened folder must really be there: one swapped for a link
    since its parent was listed (or a folder above it swapped) would be followed out of the
    checkpoint, and what it holds listed as the checkpoint's, so it is refused. Checked on the
    open folder, so no swap slips in between."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if real is not None:
        where = where_open(fd, path)
        if where != real:
            os.close(fd)
            # Linux marks a folder removed since it was opened so; a folder really named so is not
            if where.endswith(" (deleted)") and not os.path.lexists(where):
                raise FileNotFoundError(errno.ENOENT, "removed while it was listed", path)
            raise OutsideCheckpointError(f"a folder replaced while it was listed, now at {where}", path)
    return fd


def _scan(fd: int, path: str) -> Iterator[tuple[os.DirEntry, str]]:
    """The entries of the open folder at `path`, each with its path; closes it."""
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                yield entry, os.path.join(path, entry.name)
    finally:
        os.close(fd)


def walk_local(top: str, cut: int) -> list[FileInfo]:
    """Every file under a local folder, as fsspec's `find(withdirs=False, detail=True)` lists it
    (entries that vanish meanwhile are skipped), built straight from `os.scandir`: fsspec's dict per
    file is four times a FileInfo, and cleanup lists 10^4 to 10^5 files per state partition. Paths
    are cut `cut` characters in. A missing folder, or a file given as the folder, lists as nothing,
    as with `find`."""
    files: list[FileInfo] = []
    # each folder to list, and where it really is: `top` itself may be a link (a checkpoint kept
    # elsewhere), a folder below it may not
    folders: list[tuple[str, str | None]] = [(top, None)]
    while folders:
        folder, real = folders.pop()
        try:
            fd = _open_folder(folder, real)
        except (NotADirectoryError, FileNotFoundError):
            continue  # or removed since its parent was listed
        here = real or where_open(fd, folder)
        for entry, path in _scan(fd, folder):
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append((path, os.path.join(here, entry.name)))
                else:
                    files.append(_file_of(entry, path, cut))
            except FileNotFoundError:
                continue
    return files


def list_local(top: str, cut: int, root: str | None = None) -> Folder:
    """One local folder as fsspec's `ls(detail=True)` shows it, from one `os.scandir`: fsspec's
    costs a dict and two path normalisations per entry, and the fleet view and the commit sensor
    list thousands of small folders a pass. A file given as the folder lists as an empty folder
    that exists, a missing one as a folder that does not. A folder under `root` (a walk's, which
    may itself be a link) must really be there (`_open_folder`)."""
    files: list[FileInfo] = []
    folders: list[str] = []
    real = None
    if root and top.startswith(root + "/"):
        real = os.path.realpath(root) + top[len(root) :].rstrip("/")
    try:
        fd = _open_folder(top, real)
    except NotADirectoryError:
        return Folder((), (), True)
    except FileNotFoundError:
        return Folder((), (), False)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise NotARegularFileError("a link in a loop, which leads to no folder: not listed", top) from exc
    for entry, path in _scan(fd, top):
        try:
            if entry.is_dir(follow_symlinks=False):
                folders.append(path[cut:])
            else:
                files.append(_file_of(entry, path, cut))
        except FileNotFoundError:
            continue
    return Folder(tuple(sorted(files, key=lambda f: f.rel)), tuple(sorted(folders)), True)


def escapes(full: Callable[[str], str], folder: str, files: Iterable[FileInfo]) -> dict[str, str]:
    """{rel: where it really is} for each file whose real path (symlinks in any component, the
    file's own included) lies outside `folder`; `full` makes a relative path absolute. A file the
    listing did not call a link is where its folder really is: one realpath per folder, not per
    file (cleanup guards 10^4-10^5 candidates per partition)."""
    top = os.path.realpath(full(folder)) + os.sep
    resolved: dict[str, str] = {}
    out = {}
    for f in files:
        rel = f.rel
        if f.link or (f.link is None and os.path.islink(full(rel))):
            real = os.path.realpath(full(rel))
        else:
            parent, _, name = rel.rpartition("/")
            where = resolved.get(parent)
            if where is None:
                where = resolved[parent] = os.path.realpath(full(parent)) + os.sep
            if where.startswith(top):
                continue
            real = where + name
        if not real.startswith(top):
            out[rel] = real
    return out


def replace_atomically(target: str, data: bytes, temp_prefix: str) -> None:
    """`target`'s bytes replaced whole: a temp file beside it, fsynced, renamed over it, so a
    reader sees the old bytes or the new, never a part."""
    folder, name = os.path.split(target)
    temp = os.path.join(folder, f"{temp_prefix}{name}.{uuid.uuid4().hex}.tmp")
    try:
        with failing("write", target), open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with failing("write", target):
            os.replace(temp, target)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def write_new(target: str, data: bytes, temp_prefix: str) -> None:
    """A new file, whole or not at all, never over another (`link_into_place`)."""

    def fill(temp: str) -> None:
        with open(temp, "wb") as f:
            f.write(data)

    link_into_place(target, temp_prefix, fill)


class LocalBackend(FsspecBackend):
    """The local disk: durable writes (fsync, link into place, rename), Python's and the kernel's
    own reads where fsspec's cost more, folders made and removed, symlinks resolved."""

    latency_bound = False
    appends = True
    hidden_checksums = True  # Hadoop's LocalFileSystem is a ChecksumFileSystem

    def find(self, top: str, prefix: str) -> list[FileInfo]:
        return walk_local(top, len(prefix))

    def ls(self, top: str, prefix: str) -> Folder:
        return list_local(top, len(prefix), prefix.rstrip("/"))

    def fence(self, root: str) -> str | None:
        return fence_of(root)

    def stat(self, path: str, rel: str, fence: str | None = None) -> FileInfo | None:
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):  # as its target, as fsspec's `info`, when that is inside
                st = os.stat(path)  # a dangling link is no file
                real = os.path.realpath(path)
                if fence is not None and not inside(real, fence):
                    raise OutsideCheckpointError(f"a symlink to {real}, outside the checkpoint", path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return None if stat.S_ISDIR(st.st_mode) else FileInfo(rel, st.st_size, st.st_mtime)

    def cat_many(self, paths: list[str], fence: str | None, limit: int) -> dict[str, bytes]:
        return {path: read_regular(path, fence, limit=limit) for path in paths}

    def cat(self, path: str, start: int, end: int, fence: str | None = None) -> bytes:
        # Python's own file: fsspec's local cat_file costs twice as much a call (21 µs against
        # 11 µs for a lineage header's first block).
        return read_regular(path, fence, start, end)

    def cat_bounded(self, path: str, limit: int, fence: str | None = None) -> bytes:
        return read_regular(path, fence, limit=limit)

    def heads(
        self, paths: list[str], ends: list[int], fence: str | None = None
    ) -> list[bytes | BaseException]:
        return list(local_heads(paths, ends, fence))

    def download(
        self, path: str, out: BinaryIO, size: int | None, chunk: int, calls: Calls, fence: str | None = None
    ) -> tuple[int, int]:
        """One open file, read sequentially."""
        import crc32c

        calls.add("read")
        crc, done = 0, 0
        with os.fdopen(open_regular(path, fence), "rb") as src:
            while block := src.read(chunk):
                crc, done = crc32c.crc32c(block, crc), done + out.write(block)
        return done, crc

    def open(self, path: str, block_size: int | None, size: int | None, fence: str | None = None) -> BinaryIO:
        # Python's own buffered file, not fsspec's wrapper (a third of the cost of opening), with
        # its default buffer: a local read costs a system call, not a request, and a buffer of
        # `block_size` (128 KiB for a lineage header) is a fresh mapping of memory per open, four
        # times the cost of the read. Cleanup opens a header per retained batch and partition.
        return os.fdopen(open_regular(path, fence), "rb")

    def write(self, target: str, data: bytes) -> None:
        # Replaced whole, never written through: a link or a FIFO someone put at one of this
        # tool's files (an audit trail is writable by others) is replaced, not followed or
        # blocked on.
        os.makedirs(os.path.dirname(target), exist_ok=True)
        replace_atomically(target, data, ".ckpt-write-")

    def write_new(self, target: str, data: bytes, temp_prefix: str) -> str | None:
        write_new(target, data, temp_prefix)
        return None

    def replace(self, target: str, data: bytes, etag: str | None, temp_prefix: str) -> str | None:
        replace_atomically(target, data, temp_prefix)
        return None

    def write_from(self, target: str, temp_prefix: str, fill: Callable[[str], T]) -> T:
        return link_into_place(target, temp_prefix, fill)

    def put_new(self, local_path: str, target: str, temp_prefix: str) -> None:
        link_into_place(target, temp_prefix, lambda temp: shutil.copyfile(local_path, temp))

    def put_file(self, local_path: str, target: str, *, move: bool) -> None:
        # `move`: on the same file system the file is renamed into place rather than copied (a
        # cleanup manifest can be gigabytes); durable before anything that names it is published
        # (an SST before its zip).
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not (move and renamed(local_path, target)):
            self.fs.put_file(local_path, target)
        fsync_path(target)
        fsync_path(os.path.dirname(target))

    def append(self, target: str, data: bytes) -> str:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return target

    def link(self, source: str, target: str, fence: str | None = None) -> bool:
        """A hard link: False when the disk cannot give one (another file system, no hard links).
        The source is the regular file `open_regular` admits, linked by its real path; should a
        folder be swapped between the two, the new name holds another file, which the inode
        comparison after the link catches: it is unlinked and refused."""
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = open_regular(source, fence)
        try:
            opened = os.fstat(fd)
            os.link(where_open(fd, source), target, follow_symlinks=False)
            linked = os.lstat(target)
            if (linked.st_dev, linked.st_ino) != (opened.st_dev, opened.st_ino):
                os.unlink(target)
                raise OutsideCheckpointError(
                    "changed while it was linked (a folder swapped?): not linked", source
                )
            fsync_path(os.path.dirname(target))
        except (FileExistsError, FileNotFoundError):
            raise
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                return False
            raise
        finally:
            os.close(fd)
        return True

    def delete(
        self,
        root: str,
        rels: list[str],
        fence: str | None = None,
        folders: dict[str, list[int]] | None = None,
    ) -> dict[str, str]:
        return delete_under(root, fence, rels, folders)

    def folder_ids(self, full: Callable[[str], str], rels: Iterable[str]) -> dict[str, list[int]]:
        return folder_ids(full, rels)

    def remove_empty_folders(
        self, full: Callable[[str], str], rels: Iterable[str], fence: str | None = None
    ) -> None:
        remove_empty_under(full(""), fence, rels)

    def escapes(self, full: Callable[[str], str], folder: str, files: Iterable[FileInfo]) -> dict[str, str]:
        return escapes(full, folder, files)

    def identity(self, root: str) -> str:
        """Symlinks resolved (`/x/alias/q` with alias -> real is `/x/real/q`), bind mounts and a
        file system mounted twice taken back to one mount (`mounts`), and each name case-folded
        where its folder finds it in any case (`case_folded`). A link to nothing on the way is
        refused: what is made at its place (a lease, a fork) would land where the link points,
        which nobody named (a link to `/nowhere` put a lease folder at `/`)."""
        _refuse_dangling(root)
        return case_folded(canonical_path(root))

    def spark_url(self, root: str) -> str:
        return f"file:{root}"


def _refuse_dangling(path: str) -> None:
    """The last part of `path` that is there, if it is a link whose target is not, refused."""
    at = path
    while not os.path.lexists(at):
        if (parent := os.path.dirname(at)) == at:
            return
        at = parent
    if os.path.islink(at) and not os.path.exists(at):
        link = "a link" if at == path else f"{at}, on its way, is a link"
        raise OutsideCheckpointError(f"{link} to {os.readlink(at)!r}, which does not exist", path)
