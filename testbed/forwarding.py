"""What the test proxies in front of the object store servers share (`s3proxy`, `gcsserver`): a
request handler that reads a request's body, sends the request on to the server, and writes its
answer back."""

from __future__ import annotations

import http.client
from http.server import BaseHTTPRequestHandler

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
