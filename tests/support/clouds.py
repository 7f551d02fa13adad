"""Azure Blob Storage and GCS in tests: how Spark's connectors name a place there."""

from __future__ import annotations

from testbed.azurite import ACCOUNT


def abfs_url(where: str, account: str = ACCOUNT) -> str:
    """`container/key` as Spark's ABFS connector names it: with the account."""
    container, _, key = where.partition("/")
    return f"abfss://{container}@{account}.dfs.core.windows.net/{key}"
