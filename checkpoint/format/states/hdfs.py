"""Spark's default: the HDFS-backed state store, format V1 (`<v>.delta` and `<v>.snapshot`)."""

from checkpoint.format.providers import HDFS_FILES, Provider
from checkpoint.format.states.base import StateFormat

HDFS = StateFormat(
    Provider.HDFS,
    1,
    HDFS_FILES,
    snapshot_by_provider=True,
    repartition_refused="the HDFS-backed state store: Spark's repartitioner reads RocksDB state only "
    "(it refuses this one: UNSUPPORTED_PROVIDER)",
    migration_relays_prefix_keys=True,
)
