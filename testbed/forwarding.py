"""What the test proxies in front of the object store servers share (`s3proxy`, `gcsserver`,
`azurite`): a server on loopback that records every request it passes on (`CountingProxy`), and a
request handler that reads a request's body, sends the request on to the server, and writes its
answer back (`Forwarding`)."""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Hop-by-hop headers, and the length: the proxy sends each body whole, with its own length.
DROP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class Forwarding(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A reply is written as headers, then body: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers (up to 40 ms on Linux), a stall no store adds.
    disable_nagle_algorithm = True
    upstream: tuple[str | None, int | None] = (None, None)  # the server's host and port

    def log_message(self, *args):
        pass

    def body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunk = self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def forwarded_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() not in DROP}

    def forward(self, headers: dict[str, str], body: bytes):
        """(status, headers, body) of the server's answer to this request, sent with `headers`."""
        host, port = self.upstream
        conn = http.client.HTTPConnection(host or "127.0.0.1", port, timeout=120)
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        length = str(len(body))
        for k, v in headers:
            if k.lower() == "content-length" and self.command == "HEAD":
                length = v  # a HEAD answers with the object's size and no body
            elif k.lower() not in DROP:
                self.send_header(k, v)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    # http.server listens with a queue of 5: a client opening more connections at once (a pool of
    # 16 deletes) had the rest dropped, each tried again by its kernel a second or more later.
    request_queue_size = 1024


class CountingProxy:
    """A proxy on loopback in front of a store's server (`upstream`, its URL): `requests` holds
    what each handler recorded (each with an `op`, the store's name for the call), `counts` them
    by operation. A subclass gives its `Forwarding` handler (`_handler`)."""

    def __init__(self, upstream: str):
        parsed = urllib.parse.urlparse(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.requests: list[Any] = []
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[Forwarding]:
        raise NotImplementedError

    def record(self, request: Any) -> None:
        with self.lock:
            self.requests.append(request)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()

    def counts(self) -> Counter:
        with self.lock:
            return Counter(r.op for r in self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
