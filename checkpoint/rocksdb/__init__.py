"""RocksDB state as Spark's provider writes it, for the actions that write it themselves
(compaction's rebuild, migration): the writer, the checked fetch of a base, the zip's publish."""

from checkpoint.rocksdb.fetch import FetchedBase, fetch_base
from checkpoint.rocksdb.publishing import ZipTarget, publish
from checkpoint.rocksdb.writer import (
    SPARK_OPTIONS,
    bulk_options,
    merge_delimiter,
    open_db,
    option_values,
    set_options,
    write_in_batches,
)

__all__ = [
    "FetchedBase",
    "SPARK_OPTIONS",
    "ZipTarget",
    "bulk_options",
    "fetch_base",
    "merge_delimiter",
    "open_db",
    "option_values",
    "publish",
    "set_options",
    "write_in_batches",
]
