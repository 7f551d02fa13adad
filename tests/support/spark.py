"""The Spark side of the core's actions, handed to the core's tests as the `ports` fixture
(tests/conftest.py): the ports `jobs/` gives each action on the session's Spark. A test under
tests/checkpoint/ asks for them, and imports only the core (the import contract that says so)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from checkpoint.storage import Storage
from jobs.compact import run_compaction_tasks
from jobs.expiry import spark_purges
from jobs.migrate import SparkStateDigests, spark_ports
from jobs.repartition import rows_per_partition, spark_engine
from jobs.spark_session import reach, scoped_confs


@dataclass(frozen=True)
class SparkPorts:
    spark: Any
    # The migration's proof in Spark, as a type: a test subclasses it to make the proof fail.
    digests: type[SparkStateDigests] = SparkStateDigests

    def confs(self, confs: dict[str, str]) -> AbstractContextManager[None]:
        """The session's confs set to `confs` within the block, and as they were after it."""
        return scoped_confs(self.spark, confs)

    def reach(self, storage: Storage) -> None:
        """The session's s3a settings for `storage`'s bucket."""
        reach(self.spark, storage)

    @property
    def compaction(self) -> Callable:
        """`CompactionOptions`' rebuild: one Spark job per store."""
        return functools.partial(run_compaction_tasks, self.spark)

    @property
    def migration(self):
        """`MigrationOptions`' ports."""
        return spark_ports(lambda: self.spark)

    @property
    def repartition(self):
        """`RepartitionOptions`' engine."""
        return spark_engine(lambda: self.spark)

    @property
    def purge(self):
        """`PurgeOptions`' run."""
        return spark_purges(lambda: self.spark)

    def rows_per_partition(self, *args: Any) -> dict[int, dict[int, int]]:
        """What Spark's reader finds in each partition, for each partition count."""
        return rows_per_partition(self.spark, *args)
