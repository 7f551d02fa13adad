"""A Spark standalone master and worker on loopback, from the pyspark installation itself."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def standalone_cluster(logs: Path) -> Iterator[str]:
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1"}
    master_url = f"spark://127.0.0.1:{port}"
    logs.mkdir(parents=True, exist_ok=True)
    procs = [
        subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(port), "--webui-port", str(ui)],
                         env=env, stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT),
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "Starting Spark master" not in (logs / "master.log").read_text() or not _listening(port):
            if time.monotonic() > deadline or procs[0].poll() is not None:
                raise RuntimeError(f"the standalone master did not start: {logs / 'master.log'}")
            time.sleep(0.5)
        procs.append(
            subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker", master_url, "--host",
                              "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui)],
                             env=env, stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT)
        )  # fmt: skip
        while "Successfully registered with master" not in (logs / "worker.log").read_text():
            if time.monotonic() > deadline + 60 or procs[1].poll() is not None:
                raise RuntimeError(f"the standalone worker did not register: {logs / 'worker.log'}")
            time.sleep(0.5)
        yield master_url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
