"""Writing RocksDB as Spark's provider reads it: the options of a bulk write and of Spark's own
OPTIONS files, the merge operator's delimiter from the offset conf (a wrong one corrupts list state
silently), opening a folder, and writes in bounded batches. Compaction's rebuild and migration's
writer both stand on it (docs/compaction.md, the rebuild notes)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from checkpoint.errors import RebuildError
from checkpoint.policy import Policy

MERGE_VERSION_CONF = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"
_DELIMITERS = {None: b",", "1": b",", "2": b""}  # StringAppendOperator's delimiter per version


# What a Spark 4.x OPTIONS file says for the settings the rebuild changes; the published OPTIONS
# get back the base's own values (these, for a store built without a base).
SPARK_OPTIONS = {
    "memtable_factory": "SkipListFactory",
    "allow_concurrent_memtable_write": "true",
    "write_buffer_size": "67108864",
    "max_write_buffer_number": "2",
    "disable_auto_compactions": "false",
    "cache_index_and_filter_blocks": "false",
}


def bulk_options(policy: Policy, delimiter: bytes) -> dict[str, str]:
    """The rebuild's own settings. A vector memtable takes appends and sorts once at flush (random
    inserts into Spark's skip list cost 1.7 times as much); a bounded memtable flushes a large chain
    to several SSTs; with compactions off the base's SSTs are never rewritten."""
    return {
        # docs/compaction.md, rebuild note 1: RocksDB reads the merge operator from the newest
        # OPTIONS file, and Spark's says StringAppendOperator without a delimiter, which means ","
        # - not what mergeOperatorVersion 2 uses.
        "merge_operator": f"{{id=StringAppendOperator;delimiter={delimiter.decode()};}}",
        "memtable_factory": "{id=VectorRepFactory;count=0;}",
        "allow_concurrent_memtable_write": "false",
        "write_buffer_size": str(policy.rebuild_memtable_bytes),
        "max_write_buffer_number": "2",
        "disable_auto_compactions": "true",
        # Index and bloom-filter blocks grow with the store: in the bounded block cache, not beside it.
        "cache_index_and_filter_blocks": "true",
    }


def merge_delimiter(conf: dict[str, str]) -> bytes:
    version = conf.get(MERGE_VERSION_CONF)
    if version not in _DELIMITERS:
        raise RebuildError(f"unknown {MERGE_VERSION_CONF}={version!r}: the merge semantics are not known")
    return _DELIMITERS[version]


def _new_db_options(policy: Policy):
    """A store without a base starts from an empty RocksDB: Spark 4.x's table format (block-based,
    format_version 5, 4 KiB blocks, 10-bit bloom filter, LZ4) with the rebuild's bounded memory."""
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(5)
    table.set_block_size(4096)
    table.set_bloom_filter(10, False)
    table.set_block_cache(rocksdict.Cache(policy.rebuild_block_cache_bytes))
    table.set_cache_index_and_filter_blocks(True)  # as bulk_options: the cache bounds them too
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_memtable_factory(rocksdict.MemtableFactory.vector())
    opts.set_allow_concurrent_memtable_write(False)  # a vector memtable refuses concurrent writes
    opts.set_write_buffer_size(policy.rebuild_memtable_bytes)
    opts.set_max_write_buffer_number(2)
    opts.set_disable_auto_compactions(True)
    opts.create_if_missing(True)
    return opts


def open_db(folder: Path, policy: Policy, *, read_only: bool = False):
    """RocksDB over `folder`. An existing DB takes its column-family options (merge operator,
    table format, memtable) from its newest OPTIONS file, which the rebuild rewrites first; the
    block cache, which OPTIONS files do not carry, is passed here so that its size is ours."""
    import rocksdict

    kwargs: dict[str, Any] = {}
    if read_only:
        kwargs["access_type"] = rocksdict.AccessType.read_only(False)
    if not any(folder.glob("OPTIONS-*")):
        return rocksdict.Rdict(str(folder), options=_new_db_options(policy), **kwargs)
    cache = rocksdict.Cache(policy.rebuild_block_cache_bytes)
    _, families = rocksdict.Options.load_latest(str(folder), rocksdict.Env(), False, cache)
    options = rocksdict.Options(raw_mode=True)
    options.set_allow_concurrent_memtable_write(False)  # a DB option that the vector memtable needs
    return rocksdict.Rdict(str(folder), options=options, column_families=families, **kwargs)


def option_values(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """The values of `name=value` lines in a RocksDB folder's newest OPTIONS file."""
    files = sorted(folder.glob("OPTIONS-*"))
    text = files[-1].read_text() if files else ""
    found = {}
    for name in names:
        m = re.search(rf"^\s*{name}=(.*)$", text, re.MULTILINE)
        if m:
            found[name] = m.group(1)
    return found


def set_options(folder: Path, values: dict[str, str]) -> None:
    """Sets `name=value` lines in every OPTIONS file of a RocksDB folder."""
    for options in folder.glob("OPTIONS-*"):
        text = options.read_text()
        for name, value in values.items():
            line = re.compile(rf"^(\s*){name}=.*$", re.MULTILINE)
            text = line.sub(lambda m: f"{m.group(1)}{name}={value}", text)  # noqa: B023 - used at once
        options.write_text(text)


def write_in_batches(
    db, write_opts, per_batch: int, op: str, keys: list[bytes], *values: list[bytes]
) -> None:
    """Bounded batches, so a large chain is not one giant allocation; the calls are made in C."""
    import rocksdict

    for start in range(0, len(keys), per_batch):
        batch = rocksdict.WriteBatch(raw_mode=True)  # a written batch is consumed: one per write
        end = start + per_batch
        deque(map(getattr(batch, op), keys[start:end], *(v[start:end] for v in values)), maxlen=0)
        db.write(batch, write_opts)
