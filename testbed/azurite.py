"""A real Azure Blob Storage server on loopback for the tests: Azurite, from the npm registry.

Installed once into the cache (`npm install azurite@AZURITE`, about a minute) when it is missing;
its blob service alone, bound to 127.0.0.1 on a free port, data in the test's folder. The account
is Azurite's well-known development account, whose key is public: nothing here is a secret.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed.cache import cache_home
from testbed.s3server import free_ports, stop_process, wait_serving

AZURITE = "3.35.0"
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> Path:
    """`azurite-blob`, installed into the cache from the npm registry the first time."""
    home = cache_home() / f"azurite-{AZURITE}"
    binary = home / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("Azurite needs Node.js and npm (Debian: apt-get install nodejs npm)")
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    install = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(partial), f"azurite@{AZURITE}"]
    out = subprocess.run(install, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"npm install azurite@{AZURITE} failed:\n{out.stderr[-2000:]}")
    shutil.rmtree(home, ignore_errors=True)
    partial.rename(home)  # whole or not at all: a cut install is done again
    return binary


@dataclass
class Azurite:
    endpoint: str  # the blob service, with the account: http://127.0.0.1:<port>/devstoreaccount1
    process: subprocess.Popen
    log: Path

    def connection_string(self, endpoint: str | None = None) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                f"BlobEndpoint={endpoint or self.endpoint};")  # fmt: skip

    def storage_options(self, endpoint: str | None = None) -> dict:
        return {"connection_string": self.connection_string(endpoint)}

    def filesystem(self):
        """A client straight to the server, for setting up and checking."""
        import adlfs

        return adlfs.AzureBlobFileSystem(**self.storage_options(), skip_instance_cache=True)

    def stop(self) -> None:
        stop_process(self.process)


def start_azurite(workdir: Path) -> Azurite:
    (port,) = free_ports(1)
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    log = workdir / "azurite.log"
    where = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data)]
    args = [str(azurite_binary()), *where, "--skipApiVersionCheck", "--loose"]
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=workdir)
    server = Azurite(f"http://127.0.0.1:{port}/{ACCOUNT}", process, log)
    wait_serving(process, log, server.endpoint + "?comp=list", "azurite")
    return server


@contextmanager
def azurite_services(workdir: Path, container: str) -> Iterator[Azurite]:
    """The server and an empty container."""
    server = start_azurite(workdir)
    try:
        server.filesystem().mkdir(container)
        yield server
    finally:
        server.stop()
