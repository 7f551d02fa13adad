"""The `ckpt` console script this interpreter installed, run as a user runs it.

`ckpt(...)` runs each command in a child forked from a helper process that imported `cli.main` once
(one a test worker), not in a new interpreter: a new one spends about 0.25 CPU-seconds importing
the core before the command starts, and the suite runs some hundreds of commands. The child gets
the command's own arguments, environment, working folder and standard streams, runs the same entry
point as the console script, and exits with its status. No module of the product reads the
environment when it is imported (`test_no_product_module_reads_the_environment_when_imported`), so
what a test sets reaches the command as it would reach a new process. Where a test needs the
console script itself (peak RSS, signals, a terminal), it runs `CKPT` as a process:
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
import time
from pathlib import Path

CKPT = shutil.which("ckpt", path=str(Path(sys.executable).parent)) or "ckpt"

# Serves one command at a time on the socket it is given (fd argv[1]): a request is the command's
# JSON with its three standard streams as passed descriptors; the answer is the child's exit status
# in decimal, and a "kill" sent meanwhile SIGKILLs the child (this process is its parent, so the pid
# is still the child's until it is reaped here). It ends when the socket closes. Fork is safe only
# while this process has one thread, so it exits before saying it is ready where an import started
# another (the caller then starts commands as processes). The child lets the command's SystemExit,
# or its exception, end the interpreter as a script's would: threads joined, atexit run, the status
# converted by Python itself.
_SERVER = r"""
import json, os, select, socket, sys, threading
link = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(sys.argv[1]))
sys.path[0] = os.path.dirname(sys.argv[2])  # as the console script's own folder, not the cwd ('')
import cli.main
# What the commands import as they run, but Spark's jobs: their JVM's start dwarfs their imports.
for action in ("cleanup", "compaction", "expiry", "fork", "migrate", "rehearsal", "repartition", "retire"):
    __import__(f"checkpoint.{action}")
if threading.active_count() != 1:
    raise SystemExit(3)
link.sendall(b"ready")
while True:
    message, fds, _, _ = socket.recv_fds(link, 1 << 20, 3)
    if not message:
        break
    if message == b"kill":  # sent as the child ended on its own: answered already
        continue
    request = json.loads(message)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        link.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        if request["address_space"] is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (request["address_space"],) * 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]
        cli.main.run()
        raise SystemExit(0)
    for fd in fds:
        os.close(fd)
    ended = os.pidfd_open(pid)
    while ended not in select.select([link, ended], [], [])[0]:
        if link.recv(16) in (b"kill", b""):
            os.kill(pid, 9)
    os.close(ended)
    _, status = os.waitpid(pid, 0)
    link.sendall(str(os.waitstatus_to_exitcode(status)).encode())
"""

# What Python reads once, as it starts (and fsspec and coloredlogs as they are imported): a
# command whose environment differs from the helper's in one of these runs as a process of its own.
_READ_AT_START = ("PYTHON", "LC_", "LANG", "TZ", "FSSPEC_", "COLOREDLOGS_")


class _Forker:
    """This process's helper, started at its first command."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # a message arrives whole
        self.link = ours
        # Its stderr is the caller's: an import that fails there is said, not hidden behind the
        # processes the suite then falls back to.
        self.process = subprocess.Popen([sys.executable, "-c", _SERVER, str(theirs.fileno()), CKPT],
                                        pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL)  # fmt: skip
        theirs.close()
        self.started = {k: v for k, v in os.environ.items() if k.startswith(_READ_AT_START)}
        self.owner = os.getpid()  # a process forked from this one shares the socket, not the helper
        self.lock = threading.Lock()
        if self._answer(120) != "ready":
            raise ConnectionError("the command helper could not start")

    def serves(self, environ: dict[str, str]) -> bool:
        asked = {k: v for k, v in environ.items() if k.startswith(_READ_AT_START)}
        return os.getpid() == self.owner and asked == self.started

    def run(
        self, argv: list[str], env: dict[str, str], cwd: str, timeout: float, address_space: int | None
    ) -> subprocess.CompletedProcess:
        """As `subprocess.run(argv, capture_output=True, text=True, timeout=...)`: the output is read
        until every process holding the pipes has closed them (the JVM a command started too)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            with open(os.devnull, "rb") as stdin:
                asked = {"argv": argv, "env": env, "cwd": cwd, "address_space": address_space}
                request = json.dumps(asked).encode()
                socket.send_fds(self.link, [request], [stdin.fileno(), out_w, err_w])
            os.close(out_w)
            os.close(err_w)
            out_w = err_w = -1
            deadline = time.monotonic() + timeout
            out, err, drained = _drain({out_r: bytearray(), err_r: bytearray()}, deadline)
            if not drained:
                self.link.sendall(b"kill")
                self._answer(None)
                raise subprocess.TimeoutExpired(argv, timeout, _text(out), _text(err))
            code = self._answer(max(deadline - time.monotonic(), 0.0) + 60)
            if not code.lstrip("-").isdigit():
                raise ConnectionError(f"the command helper answered {code!r}, not a status")
            return subprocess.CompletedProcess(argv, int(code), _text(out), _text(err))
        finally:
            for fd in (out_r, err_r, out_w, err_w):
                if fd >= 0:
                    os.close(fd)

    def _answer(self, timeout: float | None) -> str:
        self.link.settimeout(timeout)
        answer = self.link.recv(64)
        if not answer:
            raise ConnectionError("the command helper ended")
        return answer.decode()


def _drain(pipes: dict[int, bytearray], deadline: float) -> tuple[bytes, bytes, bool]:
    """Both pipes read to their end, or to the deadline (False)."""
    import selectors

    out, err = pipes.values()
    with selectors.DefaultSelector() as selector:
        for fd in pipes:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), False
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    pipes[key.fd] += chunk
                else:
                    selector.unregister(key.fd)
    return bytes(out), bytes(err), True


def _text(data: bytes) -> str:
    """As `subprocess.run(text=True)` reads it: universal newlines (a progress line's `\r` too)."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


_FORKER: list[_Forker | None] = []
_STARTING = threading.Lock()


def _forker() -> _Forker | None:
    """This process's helper (None with `CKPT_TESTS_FORK_CLI=0`, or once it could not serve)."""
    with _STARTING:
        if not _FORKER:
            try:
                _FORKER.append(_Forker() if os.environ.get("CKPT_TESTS_FORK_CLI", "1") != "0" else None)
            except (OSError, TimeoutError):
                _FORKER.append(None)
    return _FORKER[0]


def ckpt(*args: str | os.PathLike, timeout: float = 120, env: dict[str, str] | None = None,
         cwd: str | os.PathLike | None = None,
         address_space: int | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """`env`: variables set on top of this process's environment (a crash point); `address_space`:
    the command's limit in bytes (`RLIMIT_AS`), where a test proves its memory bounded."""
    argv = [CKPT, *map(os.fspath, args)]
    environ = {**os.environ, **env} if env else dict(os.environ)
    forker = _forker()
    # a second thread's command, a forked process's, or one Python would start differently, runs
    # as a process of its own
    if forker is not None and forker.serves(environ) and forker.lock.acquire(blocking=False):
        try:
            return forker.run(argv, environ, os.fspath(cwd or os.getcwd()), timeout, address_space)
        except OSError:  # a helper that died or answered out of turn serves no more
            _FORKER[0] = None
            forker.link.close()
            raise
        finally:
            forker.lock.release()

    def limit() -> None:
        if address_space is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=environ, cwd=cwd,
                          preexec_fn=limit if address_space is not None else None)  # fmt: skip


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
