"""RocksDB, checkpoint format V2: `<v>_<id>.zip` and `.changelog`, named by the commit log's ids."""

from checkpoint.format.providers import ROCKSDB_FILES, Provider
from checkpoint.format.states.base import StateFormat

ROCKSDB_V2 = StateFormat(
    Provider.ROCKSDB,
    2,
    ROCKSDB_FILES,
    in_rocksdb=True,
    named_by_commits=True,
    sidecars=True,
    compacts_while_running=True,
    any_writer_proven=False,
    migration_refused="already RocksDB format V2: `ckpt fork` relocates it as it is",
)
