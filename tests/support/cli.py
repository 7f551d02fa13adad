"""The `ckpt` console script this interpreter installed, run as a user runs it.

`ckpt(...)` runs each command in a child forked from a helper process that imported `cli.main` once
(one a test worker), not in a new interpreter: a new one spends about 0.25 CPU-seconds importing
the core before the command starts, and the suite runs some hundreds of commands. The child gets
the command's own arguments, environment, working folder and standard streams, runs the same entry
point as the console script, and exits with its status. No module of the product reads the
environment when it is imported (`test_no_product_module_reads_the_environment_when_imported`), so
what a test sets reaches the command as it would reach a new process. Where a test needs the
console script itself (peak RSS, signals, a terminal, limits), it runs `CKPT` as a process:
`measured`, and the tests that call `subprocess` with `CKPT`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

CKPT = shutil.which("ckpt", path=str(Path(sys.executable).parent)) or "ckpt"

# Serves one command at a time on the socket it is given (fd argv[1]): a request is the command's
# JSON with its three standard streams as passed descriptors; the answers are the child's pid, then
# its exit status, each a line. It ends when the socket closes. Fork is safe only while this process
# has one thread, so it exits before saying it is ready where an import started another (the caller
# then starts commands as processes).
_SERVER = r"""
import atexit, json, os, socket, sys, threading, traceback
link = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(sys.argv[1]))
sys.path[0] = os.path.dirname(sys.argv[2])  # as the console script's own folder, not the cwd ('')
import cli.main
# What the commands import as they run, but Spark's jobs: their JVM's start dwarfs their imports.
for action in ("cleanup", "compaction", "expiry", "fork", "migrate", "rehearsal", "repartition", "retire"):
    __import__(f"checkpoint.{action}")
if threading.active_count() != 1:
    raise SystemExit(3)
link.sendall(b"ready\n")
while True:
    message, fds, _, _ = socket.recv_fds(link, 1 << 20, 3)
    if not message:
        break
    request = json.loads(message)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        link.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        code = 1
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = request["argv"]
            cli.main.run()
            code = 0
        except SystemExit as exc:  # as the interpreter turns one into a status
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                atexit._run_exitfuncs()
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code & 0xFF)
    for fd in fds:
        os.close(fd)
    link.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    link.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
"""


class _Forker:
    """This process's helper, started at its first command; None once it could not serve."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # a message arrives whole
        self.link = ours
        self.process = subprocess.Popen([sys.executable, "-c", _SERVER, str(theirs.fileno()), CKPT],
                                        pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        theirs.close()
        self.buffer = b""
        self.owner = os.getpid()  # a process forked from this one shares the socket, not the helper
        self.lock = threading.Lock()
        self._line(120)  # ready, or ConnectionError: it could not serve

    def run(
        self, argv: list[str], env: dict[str, str], cwd: str, timeout: float
    ) -> subprocess.CompletedProcess:
        with (tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err,
              open(os.devnull, "rb") as stdin):  # fmt: skip
            request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
            socket.send_fds(self.link, [request], [stdin.fileno(), out.fileno(), err.fileno()])
            pid = int(self._line(None))
            try:
                code = int(self._line(timeout))
            except TimeoutError:
                os.kill(pid, 9)
                self._line(None)
                raise subprocess.TimeoutExpired(argv, timeout, _text(out), _text(err)) from None
            return subprocess.CompletedProcess(argv, code, _text(out), _text(err))

    def _line(self, timeout: float | None) -> str:
        self.link.settimeout(timeout)
        while b"\n" not in self.buffer:
            chunk = self.link.recv(4096)  # TimeoutError leaves what was read for the next call
            if not chunk:
                raise ConnectionError("the command helper ended")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def _text(file) -> str:
    """As `subprocess.run(text=True)` reads it: universal newlines (a progress line's `\r` too)."""
    file.seek(0)
    return file.read().decode().replace("\r\n", "\n").replace("\r", "\n")


_FORKER: list[_Forker | None] = []


def _forker() -> _Forker | None:
    """This process's helper (None with `CKPT_TESTS_FORK_CLI=0`, or where it could not serve)."""
    if not _FORKER:
        try:
            _FORKER.append(_Forker() if os.environ.get("CKPT_TESTS_FORK_CLI", "1") != "0" else None)
        except (OSError, TimeoutError):
            _FORKER.append(None)
    return _FORKER[0]


def ckpt(*args: str, timeout: float = 120, env: dict[str, str] | None = None,
         cwd: str | Path | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """`env`: variables set on top of this process's environment (a crash point)."""
    environ = {**os.environ, **env} if env else dict(os.environ)
    forker = _forker()
    # a second thread's command, or a forked process's, runs as a process of its own
    if forker is not None and forker.owner == os.getpid() and forker.lock.acquire(blocking=False):
        try:
            return forker.run([CKPT, *args], environ, str(cwd or os.getcwd()), timeout)
        finally:
            forker.lock.release()
    return subprocess.run(
        [CKPT, *args], capture_output=True, text=True, timeout=timeout, env=environ, cwd=cwd
    )


# Runs argv[2:] and writes its exit status and peak RSS (KiB) to argv[1]. The kernel's peak of a
# process counts its parent's pages until it execs (fork, or vfork's shared memory), so `ckpt` is
# started from this small interpreter, not from the test's, which may hold hundreds of MB.
_MEASURE = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def measured(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """`ckpt ARGS` as `ckpt` runs it, and the peak RSS in bytes of it and every process it waited
    for (the kernel's count, `wait4`)."""
    environ = {**os.environ, **env} if env else None
    with tempfile.TemporaryDirectory() as tmp:
        figures = os.path.join(tmp, "figures")
        out = subprocess.run([sys.executable, "-c", _MEASURE, figures, CKPT, *args], capture_output=True,
                             text=True, env=environ, check=False)  # fmt: skip
        code, kib = (int(n) for n in open(figures).read().split())
    return subprocess.CompletedProcess([CKPT, *args], code, out.stdout, out.stderr), kib * 1024
