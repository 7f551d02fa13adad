"""What the Dagster tests share: a Dagster instance of their own for each test."""

from __future__ import annotations

import dagster as dg
import pytest


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst
