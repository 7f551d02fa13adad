"""`dagster dev` (webserver and daemon) on loopback for end-to-end tests, and its GraphQL API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


@dataclass
class DagsterDev:
    url: str
    home: Path
    log: Path

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


@contextmanager
def dagster_dev(home: Path, env: dict[str, str], postgres_url: str | None = None) -> Iterator[DagsterDev]:
    """The project's workspace with the project's dagster.yaml in a fresh DAGSTER_HOME; with
    `postgres_url`, its runs, event logs and schedules in that database (dagster-postgres), as
    docs/dagster.md shows a deployment's."""
    home.mkdir(parents=True, exist_ok=True)
    config = (PROJECT / "dagster_home" / "dagster.yaml").read_text()
    if postgres_url is not None:
        config += f"storage:\n  postgres:\n    postgres_url: {json.dumps(postgres_url)}\n"
    (home / "dagster.yaml").write_text(config)
    port = _free_port()
    log = home / "dagster-dev.log"
    exe = Path(sys.executable).parent / "dagster"
    process = subprocess.Popen(
        [str(exe), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=PROJECT,
        env={**os.environ, "DAGSTER_HOME": str(home), **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the webserver, daemon and code server go down together
    )
    dev = DagsterDev(f"http://127.0.0.1:{port}", home, log)
    try:
        dev.wait_for("the webserver", lambda: _answers(dev) or process.poll() is not None, 180)
        if process.poll() is not None:
            raise AssertionError(f"dagster dev exited: {log.read_text()[-3000:]}")
        yield dev
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in _left_behind(home):
            with contextlib.suppress(ProcessLookupError):  # it may end between the scan and here
                os.kill(pid, signal.SIGKILL)


def _left_behind(home: Path) -> list[int]:
    """What `dagster dev` started outside its process group and left running (a code server that
    outlived it by more than an hour, spawning children, in two runs of the suite): told by the
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
