"""A loopback HTTP proxy in front of the S3 server: counts requests and injects S3's real failures.

Every request is recorded with the S3 operation it is, so tests can assert request economy. Faults
are armed by the tests: throttling (503 SlowDown), a listing cut off after its first page, and
DeleteObjects that fails for chosen keys. For the last, the proxy re-signs a smaller request (the
client's signature covers the body), so a key reported as failed really is still there.
"""

from __future__ import annotations

import hashlib
import urllib.parse
import xml.etree.ElementTree as ET
from base64 import b64encode
from dataclasses import dataclass, field

from testbed.forwarding import CountingProxy, Forwarding

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
CUT_TOKEN = "ckpt-proxy-cut"


@dataclass(frozen=True)
class Request:
    method: str
    op: str
    path: str
    ranged: bool
    prefix: str = ""  # a listing's prefix parameter
    condition: str = ""  # a conditional write's header: If-None-Match or If-Match

    @property
    def target(self) -> str:
        """`bucket/key` of an object request, `bucket/prefix` of a listing."""
        where = self.path.strip("/")
        return f"{where}/{self.prefix}" if self.op.startswith("List") else where


def operation(method: str, path: str, query: dict[str, list[str]]) -> str:
    if method == "POST" and "delete" in query:
        return "DeleteObjects"
    if "uploads" in query and method == "POST":
        return "CreateMultipartUpload"
    if "uploadId" in query:  # a multipart upload's own requests
        return {"PUT": "UploadPart", "POST": "CompleteMultipartUpload", "DELETE": "AbortMultipartUpload"}.get(
            method, "ListParts"
        )
    if method == "GET" and query.get("list-type") == ["2"]:
        return "ListObjectsV2"
    if method == "GET" and path.count("/") <= 1 and not query.get("uploads"):
        return "ListObjects"  # v1 listing of a bucket
    return {"GET": "GetObject", "HEAD": "HeadObject", "PUT": "PutObject", "DELETE": "DeleteObject"}.get(
        method, method
    )


@dataclass
class Faults:
    slowdown: dict[str, int] = field(default_factory=dict)  # op -> how many more 503s
    cut_listing_after: int | None = None  # keys kept on the first page of a listing, then failure
    fail_delete_keys: set[str] = field(default_factory=set)  # keys DeleteObjects reports as errors
    fail_delete_times: int = 1  # how many DeleteObjects requests fail those keys


class S3Proxy(CountingProxy):
    def __init__(self, upstream: str, access_key: str, secret_key: str, region: str):
        self.credentials = (access_key, secret_key, region)
        self.faults = Faults()
        super().__init__(upstream)

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.faults = Faults()

    def _take_slowdown(self, op: str) -> bool:
        with self.lock:
            left = self.faults.slowdown.get(op, 0)
            if left > 0:
                self.faults.slowdown[op] = left - 1
                return True
        return False

    def _handler(self):
        proxy = self

        class Handler(Forwarding):
            upstream = proxy.upstream

            def _error(self, status: int, code: str) -> None:
                body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                body += "<Message>injected by the test proxy</Message></Error>"
                self.reply(status, [("Content-Type", "application/xml")], body.encode())

            def _handle(self):
                parsed = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
                op = operation(self.command, parsed.path, query)
                if op == "PutObject" and "x-amz-copy-source" in {k.lower() for k in self.headers}:
                    op = "CopyObject"  # server-side: the bytes never pass the proxy
                body = self.body() if self.command in ("PUT", "POST") else b""
                prefix = (query.get("prefix") or [""])[0]
                condition = next((h for h in ("If-None-Match", "If-Match") if h in self.headers), "")
                ranged = "Range" in self.headers
                proxy.record(Request(self.command, op, parsed.path, ranged, prefix, condition))
                if proxy._take_slowdown(op):
                    return self._error(503, "SlowDown")
                if op == "ListObjectsV2" and query.get("continuation-token") == [CUT_TOKEN]:
                    return self._error(500, "InternalError")
                headers = self.forwarded_headers()
                withheld: list[str] = []
                if op == "DeleteObjects" and proxy.faults.fail_delete_keys:
                    body, headers, withheld = proxy._withhold(self.path, headers, body)
                status, resp_headers, resp_body = self.forward(headers, body)
                if op == "ListObjectsV2" and status == 200 and proxy.faults.cut_listing_after is not None:
                    resp_body = _cut_listing(resp_body, proxy.faults.cut_listing_after)
                if withheld and status == 200:
                    resp_body = _add_errors(resp_body, withheld)
                self.reply(status, resp_headers, resp_body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        return Handler

    def _withhold(self, path: str, headers: dict[str, str], body: bytes):
        """DeleteObjects minus the keys armed to fail, signed anew with the same credentials."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        with self.lock:
            if self.faults.fail_delete_times <= 0:
                return body, headers, []
            self.faults.fail_delete_times -= 1
            failing = set(self.faults.fail_delete_keys)
        root = ET.fromstring(body)
        withheld = []
        for obj in list(root):
            key = obj.find(f"{{{NS}}}Key")
            key = obj.find("Key") if key is None else key  # botocore may send the body without a namespace
            if key is not None and key.text in failing:
                withheld.append(key.text)
                root.remove(obj)
        new_body = ET.tostring(root, encoding="utf-8")
        keep = {"host", "content-type"}
        headers = {k: v for k, v in headers.items() if k.lower() in keep}
        headers["Content-MD5"] = b64encode(hashlib.md5(new_body).digest()).decode()
        headers["X-Amz-Content-SHA256"] = hashlib.sha256(new_body).hexdigest()
        request = AWSRequest(
            "POST", f"http://{headers.get('Host') or headers.get('host')}{path}", headers, new_body
        )
        access, secret, region = self.credentials
        S3SigV4Auth(Credentials(access, secret), "s3", region).add_auth(request)
        return new_body, dict(request.headers.items()), withheld


def _cut_listing(body: bytes, keep: int) -> bytes:
    """The first page of a listing that claims more pages; the next page request then fails."""
    ET.register_namespace("", NS)
    root = ET.fromstring(body)
    contents = root.findall(f"{{{NS}}}Contents")
    for extra in contents[keep:]:
        root.remove(extra)
    for tag, value in (("IsTruncated", "true"), ("NextContinuationToken", CUT_TOKEN)):
        node = root.find(f"{{{NS}}}{tag}")
        if node is None:
            node = ET.SubElement(root, f"{{{NS}}}{tag}")
        node.text = value
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _add_errors(body: bytes, keys: list[str]) -> bytes:
    ET.register_namespace("", NS)
    root = ET.fromstring(body)
    for key in keys:
        err = ET.SubElement(root, f"{{{NS}}}Error")
        for tag, value in (("Key", key), ("Code", "InternalError"), ("Message", "injected")):
            ET.SubElement(err, f"{{{NS}}}{tag}").text = value
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
