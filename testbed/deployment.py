"""The deployment of docs/dagster.md (Postgres, a gRPC code server, the daemon and the webserver as
separate processes) on loopback for end-to-end tests, and its GraphQL API."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


@dataclass
class DagsterDev:
    url: str
    home: Path
    log: Path  # where the processes' logs are

    def graphql(self, query: str, **variables) -> dict:
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", body, {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            doc = json.load(response)
        if doc.get("errors"):
            raise AssertionError(f"GraphQL errors: {doc['errors']}")
        return doc["data"]

    def wait_for(self, what: str, predicate, timeout: float, every: float = 2.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; log: {self.log}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Each process of the deployment ends within this long of its SIGTERM, or the fixture fails.
STOP_WITHIN = 30.0


def recipe() -> list[list[str]]:
    """The commands of docs/dagster.md's deployment recipe that start a process, as written (a
    leading `env --default-signal=...` included)."""
    page = (PROJECT / "docs" / "dagster.md").read_text()
    block = page.split("## Deploy", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line.removesuffix("&").strip()) for line in lines if line.endswith("&")]


def _as_a_script_starts(command: list[str]) -> tuple[list[str], Callable[[], None]]:
    """The command without its `env --default-signal[=SIGS]` (which is GNU's), and what a shell
    running the recipe as a script does to a `&` process before it runs: without a terminal
    neither bash nor dash has job control, and both start it with SIGINT and SIGQUIT ignored
    (which `dagster code-server` then also makes of SIGTERM), unless the command restores them.
    A restored signal is set to its default, as `env` sets it, whatever this process does with
    it: a bench started in the background (SIGINT ignored) left it ignored, and its code server
    outlived SIGTERM for good."""
    restored: set[int] = set()
    if command[0] == "env" and command[1].startswith("--default-signal"):
        restored = _signals(command[1].removeprefix("--default-signal"))
        command = command[2:]

    def as_started() -> None:
        for sig in (signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        for sig in restored:
            signal.signal(sig, signal.SIG_DFL)

    return command, as_started


def _signals(spelled: str) -> set[int]:
    """The signals GNU env's `--default-signal` names: `=INT,QUIT`, `=sigint`, `=2`; none named,
    every signal that can be set."""
    if not spelled:
        return {s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)}
    if not spelled.startswith("="):
        raise ValueError(f"not env's --default-signal: --default-signal{spelled}")
    named: set[int] = set()
    for name in spelled[1:].split(","):
        try:
            sig = int(name) if name.isdigit() else signal.Signals["SIG" + name.upper().removeprefix("SIG")]
        except KeyError:
            raise ValueError(f"env names no signal {name!r}") from None
        if sig not in signal.valid_signals():  # a number: real-time ones have no name
            raise ValueError(f"env names no signal {name!r}")
        named.add(sig)
    return named


@contextmanager
def deployment(home: Path, env: dict[str, str], postgres_url: str) -> Iterator[DagsterDev]:
    """The deployment docs/dagster.md describes, on loopback: `deploy/dagster.yaml` as the instance
    (its runs, event logs and schedules in the Postgres at `postgres_url`), then the recipe's
    commands, each its own process, in its order: the gRPC code server, the daemon, the webserver.
    Only the addresses change: loopback, and free ports."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    web_port = _free_port()
    code_server = {"CKPT_CODE_SERVER_HOST": "127.0.0.1", "CKPT_CODE_SERVER_PORT": str(_free_port())}
    environ = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_PG_URL": postgres_url, **code_server, **env}
    bin_dir = Path(sys.executable).parent
    log = home  # each process's log is a file in it
    processes: list[subprocess.Popen] = []
    names: list[str] = []
    dev = DagsterDev(f"http://127.0.0.1:{web_port}", home, log)
    try:
        for written in recipe():
            command, before = _as_a_script_starts(written)
            args = [_expand(a, environ) for a in command]
            args = [str(bin_dir / args[0]), *("127.0.0.1" if a == "0.0.0.0" else a for a in args[1:])]
            if "dagster-webserver" in args[0]:
                args[args.index("3000")] = str(web_port)
            name = Path(args[0]).name + ("-" + args[1] if args[0].endswith("/dagster") else "")
            names.append(name)
            with (home / f"{name}.log").open("wb") as out:
                processes.append(
                    subprocess.Popen(args, cwd=PROJECT, env=environ, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True,  # its children go down with it
                                     preexec_fn=before)
                )  # fmt: skip
            if len(processes) == 1:  # the code server answers before anything loads from it
                dev.wait_for("the code server", lambda: _exited(processes) or _healthy(environ), 180)
        dev.wait_for("the webserver", lambda: _exited(processes) or _answers(dev), 180)
        if _exited(processes):
            raise AssertionError(f"a process of the deployment exited: {_logs(home)}")
        yield dev
    finally:
        # The recipe's order: the webserver and the daemon, then the code server.
        outlasted = []
        for process, name in reversed(list(zip(processes, names, strict=False))):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_WITHIN)
            except subprocess.TimeoutExpired:
                outlasted.append(name)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for pid in _left_behind(home):
            with contextlib.suppress(ProcessLookupError):  # it may end between the scan and here
                os.kill(pid, signal.SIGKILL)
        if outlasted and sys.exc_info()[0] is None:
            raise AssertionError(f"outlasted SIGTERM by {STOP_WITHIN:g} s (killed): {outlasted}")


def _expand(arg: str, environ: dict[str, str]) -> str:
    for name, value in sorted(environ.items(), key=lambda item: -len(item[0])):  # $AB before $A
        arg = arg.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return arg


def _exited(processes: list[subprocess.Popen]) -> bool:
    return any(p.poll() is not None for p in processes)


def _healthy(environ: dict[str, str]) -> bool:
    where = ["-h", environ["CKPT_CODE_SERVER_HOST"], "-p", environ["CKPT_CODE_SERVER_PORT"]]
    command = [str(Path(sys.executable).parent / "dagster"), "api", "grpc-health-check", *where]
    return subprocess.run(command, env=environ, capture_output=True, timeout=60).returncode == 0


def _logs(home: Path) -> str:
    return "\n".join(f"{p.name}: {p.read_text(errors='replace')[-2000:]}" for p in sorted(home.glob("*.log")))


def _left_behind(home: Path) -> list[int]:
    """What the deployment started outside its process groups and left running (`dagster dev` once
    left a code server that outlived it by more than an hour, spawning children): told by the
    DAGSTER_HOME it inherited, which is this fixture's own folder."""
    mark = f"DAGSTER_HOME={home}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and int(proc.name) != os.getpid()
                and mark in (proc / "environ").read_bytes().split(b"\0")
            ):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def _answers(dev: DagsterDev) -> bool:
    try:
        return "version" in dev.graphql("{ version }")
    except (OSError, AssertionError):
        return False
