"""Spark's own names that this project reads in checkpoints and sets in sessions, in one place:
the state store providers' classes and the confs an offset file pins or a session is given."""

from __future__ import annotations

STATE_CLASSES = "org.apache.spark.sql.execution.streaming.state."
ROCKSDB_PROVIDER = STATE_CLASSES + "RocksDBStateStoreProvider"
HDFS_PROVIDER = STATE_CLASSES + "HDFSBackedStateStoreProvider"

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
FORMAT_VERSION_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
CODEC_CONF = "spark.sql.streaming.stateStore.compression.codec"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
# How ListState values are merged: `2` (pinned by 4.2 and later) delimits each element by its length.
MERGE_OPERATOR_CONF = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"
JOIN_STATE_FORMAT_CONF = "spark.sql.streaming.join.stateFormatVersion"
# The state data source's internal option that reads every column family's raw key and value bytes
# (TTL indexes and timers included): RocksDB stores only, the HDFS-backed provider refuses it.
RAW_FAMILIES = {"_readAllColumnFamilies": "true"}
