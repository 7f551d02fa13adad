"""A Google Cloud Storage server on loopback for the tests: gcp-storage-emulator (PyPI), behind a
proxy that counts requests and keeps the precondition the emulator ignores.

The emulator takes `ifGenerationMatch=0` on an upload and overwrites the object anyway. GCS
documents that such an upload fails with 412 when the object exists, checked when the object is
finalised. The proxy does that: an upload with the precondition (a one-request multipart upload,
or the last chunk of a resumable one, whose start is checked too) waits for the other conditional
uploads, asks the emulator whether the object exists, and answers 412 if it does; so of two writers
racing for a name one wins, as on GCS. Everything else passes through, counted by operation.

gcsfs reaches it through STORAGE_EMULATOR_HOST (anonymous), with its experimental bucket-type probe
off (GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false): that probe speaks gRPC, which the emulator lacks.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed.forwarding import CountingProxy, Forwarding
from testbed.s3server import free_ports, stop_process, wait_serving


def operation(method: str, path: str, query: dict[str, list[str]]) -> str:
    """The JSON API call a request is, by GCS's names."""
    if path.startswith("/upload/"):
        return "upload"
    if path.startswith("/batch/"):
        return "batch"
    if "/rewriteTo/" in path or "/copyTo/" in path:
        return "copy"
    if path.startswith("/download/") or query.get("alt") == ["media"]:
        return "get"
    parts = path.strip("/").split("/")  # storage v1 b <bucket> o [<name>]
    if method == "GET" and parts[-1] == "o":
        return "list"
    if method == "DELETE":
        return "delete"
    if method == "GET" and "o" in parts:
        return "stat"
    return f"{method} {'/'.join(parts[:4])}"


@dataclass(frozen=True)
class Request:
    method: str
    op: str
    path: str
    conditional: bool
    prefix: str = ""  # a listing's


class GCSProxy(CountingProxy):
    def __init__(self, upstream: str):
        self.creating = threading.Lock()  # conditional uploads, one at a time
        self.resumable: dict[str, tuple[str, str]] = {}  # upload id -> (bucket, name) created if absent
        super().__init__(upstream)

    def exists(self, bucket: str, name: str) -> bool:
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            conn.request("GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")
            response = conn.getresponse()
            response.read()
            return response.status == 200
        finally:
            conn.close()

    def _handler(self):
        proxy = self

        class Handler(Forwarding):
            upstream = proxy.upstream

            def _refuse(self, name: str) -> None:
                error = {"code": 412, "message": f"At least one of the pre-conditions you specified did not "
                                                 f"hold (the object {name} exists)"}  # fmt: skip
                body = json.dumps({"error": {**error, "errors": [{**error, "reason": "conditionNotMet"}]}})
                self.reply(412, [("Content-Type", "application/json")], body.encode())

            def _handle(self):
                parsed = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
                op = operation(self.command, parsed.path, query)
                body = self.body() if self.command in ("PUT", "POST") else b""
                span = self.headers.get("Content-Range", "")
                created = _created(parsed.path, query, body, proxy.resumable, span)
                prefix = (query.get("prefix") or [""])[0]
                proxy.record(Request(self.command, op, parsed.path, created is not None, prefix))
                if created is None:
                    return self.reply(*self.forward(self.forwarded_headers(), body))
                with proxy.creating:
                    if proxy.exists(*created):
                        return self._refuse(created[1])
                    status, headers, answer = self.forward(self.forwarded_headers(), body)
                    upload_id = _upload_id(headers)
                    if upload_id and "uploadType" in query:  # a resumable upload began: check its end too
                        proxy.resumable[upload_id] = created
                    self.reply(status, headers, answer)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _handle

        return Handler


def _created(
    path: str, query: dict[str, list[str]], body: bytes, resumable: dict, content_range: str
) -> tuple[str, str] | None:
    """(bucket, name) of an upload that must create its object, at the request that would create
    it or begin to; None for any other request."""
    if not path.startswith("/upload/storage/v1/b/"):
        return None
    bucket = path.split("/")[5]
    upload_id = (query.get("upload_id") or [""])[0]
    if upload_id:  # a resumable upload's chunk: the last one finalises the object
        if upload_id not in resumable:
            return None
        return resumable[upload_id] if _last_chunk(content_range) else None
    if query.get("ifGenerationMatch") != ["0"]:
        return None
    if "name" in query:
        return bucket, query["name"][0]
    # a multipart upload: its first part is the object's metadata, in JSON
    head = body.split(b"\n\n", 1)[1] if b"\n\n" in body else b""
    try:
        return bucket, json.loads(head.split(b"\n--", 1)[0])["name"]
    except (ValueError, KeyError):
        return None


def _last_chunk(content_range: str) -> bool:
    """Whether a chunk's `Content-Range: bytes a-b/total` ends the object (its total known and
    reached), so that the store finalises it."""
    span, _, total = content_range.removeprefix("bytes ").partition("/")
    if not total.isdigit():
        return False
    return span == "*" or span.partition("-")[2] == str(int(total) - 1)


def _upload_id(headers: list[tuple[str, str]]) -> str | None:
    location = next((v for k, v in headers if k.lower() == "location"), None)
    if not location:
        return None
    return (urllib.parse.parse_qs(urllib.parse.urlsplit(location).query).get("upload_id") or [None])[0]


@dataclass
class GCSEmulator:
    endpoint: str
    process: subprocess.Popen
    log: Path

    def storage_options(self, endpoint: str | None = None) -> dict:
        """What a deployment gives gcsfs: the endpoint (the server's, or a proxy's) and credentials
        (none, on the emulator)."""
        return {"endpoint_url": endpoint or self.endpoint, "token": "anon", "project": "test"}

    def filesystem(self, endpoint: str | None = None):
        """A client straight to the server (past the proxy), for setting up and checking."""
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(**self.storage_options(endpoint), skip_instance_cache=True)

    def stop(self) -> None:
        stop_process(self.process)


# The emulator serves one request at a time, from http.server's listen queue of 5: a sixth
# connection at once was dropped, and the client's kernel tried it again a second later, then
# three... Every GCS test crawled (300 small objects uploaded side by side took 111 s, one after
# another 0.8 s). Started with a longer queue, it serves them in turn (`-P`: nothing of the work
# folder shadows its modules).
# It also writes every object's metadata out as indented JSON after each upload and delete, in
# memory too, where nothing reads it back: each write cost what the bucket held. 1,500 small
# uploads took 17 s into an empty bucket and 85 s into one of 3,000; 0.75 s each without it.
_START = (
    "import socketserver, sys; socketserver.TCPServer.request_queue_size = 1024; "
    "from gcp_storage_emulator.storage import Storage; "
    "Storage._write_config_to_file = lambda self: None; "
    "from gcp_storage_emulator.__main__ import main; main(sys.argv[1:])"
)


def start_gcs_emulator(workdir: Path, bucket: str) -> GCSEmulator:
    (port,) = free_ports(1)
    log = workdir / "gcs-emulator.log"
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        raise RuntimeError("the GCS emulator is missing: pip install gcp-storage-emulator (a dev dependency)")
    args = [sys.executable, "-P", "-c", _START, "start", "--host", "127.0.0.1", "--port", str(port),
            "--in-memory", "--default-bucket", bucket]  # fmt: skip
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=workdir)
    server = GCSEmulator(f"http://127.0.0.1:{port}", process, log)
    wait_serving(process, log, f"{server.endpoint}/storage/v1/b/{bucket}", "the GCS emulator")
    return server


@contextmanager
def gcs_services(workdir: Path, bucket: str) -> Iterator[tuple[GCSEmulator, GCSProxy]]:
    """The emulator with an empty bucket, and the proxy in front of it."""
    server = start_gcs_emulator(workdir, bucket)
    proxy = GCSProxy(server.endpoint)
    try:
        yield server, proxy
    finally:
        proxy.close()
        server.stop()
