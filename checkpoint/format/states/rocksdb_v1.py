"""RocksDB, checkpoint format V1: `<v>.zip` and `<v>.changelog`, found by listing the store's folder."""

from checkpoint.format.providers import ROCKSDB_FILES, Provider
from checkpoint.format.states.base import StateFormat

ROCKSDB_V1 = StateFormat(Provider.ROCKSDB, 1, ROCKSDB_FILES, in_rocksdb=True)
