"""Two synthetic checkpoints that differ only in older history (`testbed.synthetic`: 35 and 155
versions a store), written onto an object store as its connector writes them (no Hadoop
checksums): what the read paths and the commit sensor's idle tick must cost alike. Its fixtures
are the whole suite's (`tests/conftest.py`'s `pytest_plugins`), written once a test module."""

from __future__ import annotations

import uuid

import pytest

from testbed import synthetic
from testbed.copying import hadoop_checksum


def write_histories(fs, base: str, protocol: str, stores: int) -> dict[str, str]:
    """`small` and `big` under `base` (`bucket/folder` on `fs`), each with `stores` stores: their
    URLs by name."""
    urls = {}
    for name, versions in (("small", 35), ("big", 155)):
        content = synthetic.files(stores, versions, window=20)
        fs.pipe({f"{base}/{name}/{rel}": data for rel, data in content.items() if not hadoop_checksum(rel)})
        urls[name] = f"{protocol}://{base}/{name}"
    return urls


@pytest.fixture(scope="module")
def s3_histories(s3) -> dict[str, str]:
    """`small` and `big` under `histories/` in the session's bucket, by name; only read."""
    server, _, bucket = s3
    return write_histories(server.filesystem(), f"{bucket}/histories", "s3", stores=4)


@pytest.fixture(scope="module", params=["azure", "gcs"])
def histories(request) -> dict:
    """On one store: `small` and `big`, in a folder of their own, written once past the proxy and
    only read (two stores each: the emulator takes each object in turn); the store's protocol,
    the folder, and its proxy."""
    server, proxy, container = request.getfixturevalue(request.param)
    protocol = {"azure": "az", "gcs": "gs"}[request.param]
    base = f"{container}/histories-{uuid.uuid4().hex[:8]}"
    urls = write_histories(server.filesystem(), base, protocol, stores=2)
    return {"urls": urls, "protocol": protocol, "container": container, "base": base, "proxy": proxy}
