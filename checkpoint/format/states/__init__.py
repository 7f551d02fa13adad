"""The state formats, one module each: `hdfs` (Spark's default), `rocksdb_v1`, `rocksdb_v2`. The
model chooses one per checkpoint from its own logs (`state_format_of`); everything downstream
asks it instead of comparing providers and versions. A new format is a new module here and its
line in `KNOWN`."""

from __future__ import annotations

import dataclasses

from checkpoint.format.providers import Provider
from checkpoint.format.states.base import Action, StateFormat
from checkpoint.format.states.foreign import FOREIGN
from checkpoint.format.states.hdfs import HDFS
from checkpoint.format.states.rocksdb_v1 import ROCKSDB_V1
from checkpoint.format.states.rocksdb_v2 import ROCKSDB_V2

KNOWN = {(f.provider, f.version): f for f in (HDFS, ROCKSDB_V1, ROCKSDB_V2)}


def state_format_of(provider_class: str | None, version: int) -> StateFormat:
    """The format of a checkpoint whose newest offset file pins `provider_class` (None: it names
    none) and whose commit log and file names say format `version`.

    Offset files without the pin predate it and ran under Spark's default, unless in format V2,
    which only RocksDB writes (the HDFS-backed store refuses checkpoint ids). Anything else, a
    provider of someone else's or a pair Spark does not write, is foreign: read, never changed."""
    provider = (
        Provider.ROCKSDB if provider_class is None and version == 2 else Provider.of_class(provider_class)
    )
    known = KNOWN.get((provider, version))
    if known is not None:
        return known
    # Fail closed: none of Spark's rules applies, so nothing that needs one runs.
    return dataclasses.replace(FOREIGN, provider=provider, version=version, pinned=provider_class)


__all__ = ["FOREIGN", "HDFS", "KNOWN", "ROCKSDB_V1", "ROCKSDB_V2", "Action", "StateFormat", "state_format_of"]
