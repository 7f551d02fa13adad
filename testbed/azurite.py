"""A real Azure Blob Storage server on loopback for the tests: Azurite, from the npm registry,
behind a proxy that counts requests by Blob Storage's operation names.

Installed once into the cache (`npm install azurite@AZURITE`, about a minute) when it is missing;
its blob service alone, bound to 127.0.0.1 on a free port, its blobs in memory. The account
is Azurite's well-known development account, whose key is public: nothing here is a secret. A
request's Shared Key signature covers its path, query and `x-ms-` headers, not the host, so it
passes the proxy unchanged.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed.cache import cache_home
from testbed.forwarding import CountingProxy, Forwarding
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
        """Through `endpoint` (a proxy's, `http://127.0.0.1:<port>`) when given."""
        blob = f"{endpoint}/{ACCOUNT}" if endpoint else self.endpoint
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                f"BlobEndpoint={blob};")  # fmt: skip

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
    log = workdir / "azurite.log"
    # In memory (no --location, which Azurite refuses beside it): 15-25% less of its CPU than
    # on disk, and no test's blobs outlive its session.
    where = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence"]
    # Without its access log and its telemetry, which sent batches to an ingestion endpoint this
    # machine cannot resolve: about a fifth less of its CPU (the proxy counts the requests).
    quiet = ["--silent", "--disableTelemetry"]
    args = [str(azurite_binary()), *where, "--skipApiVersionCheck", "--loose", *quiet]
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=workdir)
    server = Azurite(f"http://127.0.0.1:{port}/{ACCOUNT}", process, log)
    wait_serving(process, log, server.endpoint + "?comp=list", "azurite")
    return server


def operation(method: str, query: dict[str, list[str]], copy: bool) -> str:
    """The Blob Storage call a request is: `list` (List Blobs), `stat` (Get Blob Properties), `get`
    (Get Blob, ranged or whole), `upload` (Put Blob, Put Block List), `block` (Put Block), `copy`
    (Copy Blob), `delete` (Delete Blob), `batch` (Blob Batch); a container's or the account's own
    call by its method and `restype`."""
    comp = (query.get("comp") or [""])[0]
    if "restype" in query and comp not in ("list", "batch"):
        return f"{method} {query['restype'][0]}"
    if comp in ("list", "batch", "block"):
        return comp
    if method == "PUT":
        return "copy" if copy else "upload"
    return {"GET": "get", "HEAD": "stat", "DELETE": "delete"}.get(method, f"{method} {comp}".strip())


@dataclass(frozen=True)
class Request:
    method: str
    op: str
    path: str  # /<account>/<container>[/<blob>]
    prefix: str  # a listing's


class AzureProxy(CountingProxy):
    # (status, error code) to answer every Blob Batch with, not forwarded: a store that does not
    # serve the call, or refuses it as a whole. None forwards them.
    refuse_batches: tuple[int, str] | None = None
    # How many Blob Batches to come are answered, not forwarded, with every subrequest's own
    # `503 ServerBusy` (its request id echoed): a throttled account's answer, nothing deleted.
    busy_batches: int = 0

    def _handler(self):
        proxy = self

        class Handler(Forwarding):
            upstream = proxy.upstream

            def _handle(self):
                parsed = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
                copy = "x-ms-copy-source" in {k.lower() for k in self.headers}
                op = operation(self.command, query, copy)
                proxy.record(Request(self.command, op, parsed.path, (query.get("prefix") or [""])[0]))
                body = self.body() if self.command in ("PUT", "POST") else b""
                if op == "batch" and proxy.refuse_batches is not None:
                    status, code = proxy.refuse_batches
                    error = f"<Error><Code>{code}</Code><Message>refused by the test proxy</Message></Error>"
                    self.reply(status, [("x-ms-error-code", code), ("Content-Type", "application/xml")],
                               error.encode())  # fmt: skip
                    return
                if op == "batch" and proxy.busy_batches > 0:
                    proxy.busy_batches -= 1
                    self.reply(202, *_busy_parts(self.headers.get("Content-Type", ""), body))
                    return
                self.reply(*self.forward(self.forwarded_headers(), body))

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        return Handler


def _busy_parts(content_type: str, body: bytes) -> tuple[list[tuple[str, str]], bytes]:
    """A Blob Batch answer (headers, body) in which each subrequest of the batch `body` is
    answered `503 ServerBusy` under its own Content-ID and request id."""
    sent = content_type.split("boundary=", 1)[1].strip('"').encode()
    boundary = "batchresponse_busy"
    error = b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code></Error>'
    parts = []
    for part in body.split(b"--" + sent)[1:-1]:
        text = part.decode("utf-8", "replace")
        content_id = re.search(r"(?im)^content-id:\s*(\S+)", text)
        request_id = re.search(r"(?im)^x-ms-client-request-id:\s*(\S+)", text)
        parts.append(
            f"--{boundary}\r\nContent-Type: application/http\r\n"
            f"Content-ID: {content_id.group(1) if content_id else ''}\r\n\r\n"
            "HTTP/1.1 503 The server is busy.\r\nx-ms-error-code: ServerBusy\r\n"
            f"x-ms-client-request-id: {request_id.group(1) if request_id else ''}\r\n"
            f"Content-Type: application/xml\r\nContent-Length: {len(error)}\r\n\r\n"
            f"{error.decode()}\r\n"
        )
    answer = ("".join(parts) + f"--{boundary}--\r\n").encode()
    return [("Content-Type", f"multipart/mixed; boundary={boundary}")], answer


@contextmanager
def azurite_services(workdir: Path, container: str) -> Iterator[tuple[Azurite, AzureProxy]]:
    """The server with an empty container, and the counting proxy in front of it (its blob
    endpoint is the proxy's endpoint and the account: `server.connection_string(endpoint)`)."""
    server = start_azurite(workdir)
    proxy = None
    try:
        server.filesystem().mkdir(container)
        proxy = AzureProxy(server.endpoint)
        yield server, proxy
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()
