"""What the Dagster tests share: a Dagster instance of their own for each test, and a root of one
checkpoint dated past the quiet period."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from testbed.clock import date_back
from testbed.copying import copy_checkpoint


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def aged_root(corpus, tmp_path) -> Path:
    root = tmp_path / "root"
    copy_checkpoint(corpus["two_actions"], root / "orders")
    date_back(root, 8 * 3600)
    return root
