"""The one rule every local read keeps: a regular file that resolves inside its checkpoint, opened
without blocking, read to its size (or its bound plus one byte). A name read from a checkpoint, or
a folder an operator made a link, is data: a FIFO, a device, a socket or a file outside is refused
before a byte of it is read."""

from __future__ import annotations

import errno
import os
import stat

from checkpoint.errors import NotARegularFileError, OutsideCheckpointError, OversizedFileError

# A read never blocks on what it opens (a FIFO with no writer, a terminal) and never makes it the
# process's terminal; the last component is opened without following a link, so a link is
# followed only once its target is known to lie inside (`open_regular`).
_OPEN = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_PROC_FD = "/proc/self/fd"


def fence_of(root: str) -> str:
    """What every file read under `root` must resolve into: its real path, with a separator."""
    real = os.path.realpath(root)
    return real if real.endswith(os.sep) else real + os.sep


def inside(real: str, fence: str) -> bool:
    return real.startswith(fence) or real + os.sep == fence


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def where_open(fd: int, path: str) -> str:
    """The real path of an open file, as the kernel holds it (Linux's /proc); elsewhere the path's
    own resolution, which a swap between the open and this call could mislead."""
    try:
        return os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:
        return os.path.realpath(path)


def open_regular(path: str, fence: str | None) -> int:
    """A descriptor of the regular file at `path`, which resolves inside `fence` (None: anywhere):
    the rule every local read keeps, since a name read from a checkpoint (or a folder an operator
    made a link) is data. Opened without blocking and without following a last-component link; a
    link is followed only to a target inside. Then the open file itself is checked, so a link
    swapped in a folder above between the check and the open is caught too: a FIFO, a device or
    a socket raises NotARegularFileError, a folder IsADirectoryError, a file whose real path lies
    outside OutsideCheckpointError, each before a byte is read."""
    try:
        fd = os.open(path, _OPEN | NOFOLLOW)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EMLINK):  # a link as the last component
            raise
        real = os.path.realpath(path)
        if fence is not None and not inside(real, fence):
            raise OutsideCheckpointError(
                f"a symlink to {real}, outside the checkpoint: not read", path
            ) from None
        fd = os.open(real, _OPEN | NOFOLLOW)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "a folder, not a file", path)
        if not stat.S_ISREG(mode):
            raise NotARegularFileError(f"{_kind(mode)}, not a regular file: not read", path)
        if fence is not None and not inside(real := where_open(fd, path), fence):
            raise OutsideCheckpointError(f"resolves to {real}, outside the checkpoint: not read", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, fence: str | None, start: int = 0, end: int | None = None,
                 limit: int | None = None) -> bytes:  # fmt: skip
    """The bytes from `start` to `end` (the whole file when None) of a file `open_regular` admits,
    read with `pread` into a buffer sized by its `fstat` (a buffer of the bound would be a fresh
    mapping per read: 16 MiB for a log file of 2 KB). `limit`: a whole file longer than it is
    refused, having read at most the bound plus one byte (a file that grows while it is read)."""
    fd = open_regular(path, fence)
    try:
        size = os.fstat(fd).st_size
        want = (size + 1 if end is None else end) - start
        if limit is not None:
            if size > limit:
                why = f"{size} bytes, more than the {limit} a file of its kind holds: not read"
                raise OversizedFileError(why, path)
            want = min(want, limit + 1)
        chunks, got = [], 0
        while got < want:
            block = os.pread(fd, want - got, start + got)
            if not block:
                break
            chunks.append(block)
            got += len(block)
            if end is None and got == want and (limit is None or got <= limit):
                want += 1 << 20  # it grew since its fstat: read on to its end (or the bound)
                want = want if limit is None else min(want, limit + 1)
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if limit is not None and len(data) > limit:
        raise OversizedFileError(f"more than the {limit} bytes a file of its kind holds: not read", path)
    return data
