"""Session fixtures: the cached corpus of real checkpoints and one SparkSession for oracle checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from checkpoint.model import Checkpoint, load_checkpoint
from jobs.corpus import MANIFEST, checkpoints, ensure_corpus


@pytest.fixture(scope="session")
def corpus_root() -> Path:
    # Generation failures raise here and fail every test that needs the corpus, loudly.
    return ensure_corpus()


@pytest.fixture(scope="session")
def corpus(corpus_root: Path) -> dict[str, Path]:
    return checkpoints(corpus_root)


@pytest.fixture(scope="session")
def manifest(corpus_root: Path) -> dict:
    return json.loads((corpus_root / MANIFEST).read_text())


@pytest.fixture(scope="session")
def loaded(corpus: dict[str, Path]) -> dict[str, Checkpoint]:
    return {name: load_checkpoint(str(path)) for name, path in corpus.items()}


@pytest.fixture(scope="session")
def spark():
    from jobs.spark_session import local_session

    session = local_session(master="local[2]", app_name="ckpt-tests")
    yield session
    session.stop()


@pytest.fixture
def copy_of(corpus: dict[str, Path], tmp_path: Path):
    """A private copy of a corpus checkpoint, for tests that damage it."""

    def copy(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(corpus[name], dst)
        return dst

    return copy
