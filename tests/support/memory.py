"""A checkpoint in fsspec's memory filesystem, for the tests of a store that no test runs a server
for: read with the user's leave (CKPT_UNPROVEN_STORAGE=1). A fixture of the whole suite
(`tests/conftest.py`'s `pytest_plugins`), for the storage's tests and the CLI's."""

from __future__ import annotations

import uuid

import fsspec
import pytest


@pytest.fixture
def in_memory(corpus, monkeypatch):
    """A function that copies a corpus checkpoint into fsspec's memory filesystem and returns its
    `memory://` URL; the leave set, and every copy removed after the test."""
    from checkpoint.storage import UNPROVEN_LEAVE

    monkeypatch.setenv(UNPROVEN_LEAVE, "1")
    created = []

    def put(name: str) -> str:
        root = f"/{uuid.uuid4().hex}/{name}"
        mem = fsspec.filesystem("memory")
        src = corpus[name]
        mem.pipe(
            {f"{root}/{p.relative_to(src).as_posix()}": p.read_bytes() for p in src.rglob("*") if p.is_file()}
        )
        created.append(root)
        return f"memory://{root}"

    yield put
    mem = fsspec.filesystem("memory")
    for root in created:
        mem.rm(root, recursive=True)
