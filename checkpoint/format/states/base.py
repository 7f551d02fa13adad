"""What a state format is: the questions the model, the analysis and every action ask of the way a
checkpoint keeps its state, answered once per format (one module each beside this one)."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.format.layout import FileKind
from checkpoint.format.providers import Provider, StateFiles


@dataclass(frozen=True)
class StateFormat:
    """One way Spark keeps a stateful query's state: a provider and a checkpoint format version."""

    provider: Provider
    version: int  # checkpointFormatVersion, as the commit log and the file names tell it
    # The file a provider's recovery starts from, and the one it replays on top.
    files: StateFiles
    # Spark's: its files are read, checked and changed here. A provider of someone else's is not.
    spark: bool = True
    # The state lives in RocksDB instances (zips of SSTs; changelogs of RocksDB's encoding, whose
    # values lead with its encoding's version byte), not in the HDFS-backed store's UnsafeRow maps.
    in_rocksdb: bool = False
    # V2: every state file name carries the id the commit log records, and recovery names its
    # files from the commit log and the changelog headers. V1: recovery lists the store's folder.
    named_by_commits: bool = False
    # Spark writes a `.crc` sidecar beside each state file, which a copy is checked against. Where
    # it writes none, a copy is proven by decoding the file.
    sidecars: bool = False
    # Compaction may publish beside a running query: a V2 snapshot takes an id the query never
    # writes; a V1 snapshot has the name the query's own maintenance writes next.
    compacts_while_running: bool = False
    # Compaction asks Spark's own provider to write the snapshot, in the driver's JVM, instead of
    # rebuilding it in RocksDB here.
    snapshot_by_provider: bool = False
    # Whatever Spark 4.x wrote the store, this release's writing is proven against it; otherwise the
    # writer is read from each store's base zip (`analysis.generation`).
    any_writer_proven: bool = True
    # A stateful query in this format cannot be repartitioned: why, or None.
    repartition_refused: str | None = None
    # A migration to RocksDB V2 refuses this format: why, or None.
    migration_refused: str | None = None
    # A migration re-lays the keys of a prefix-scanned store: RocksDB's prefix encoder puts the
    # prefix columns first, the HDFS-backed store keeps the key row whole.
    migration_relays_prefix_keys: bool = False

    @property
    def name(self) -> str:
        """`hdfs V1`, `rocksdb V2`: how reports and `--json` name it."""
        return f"{self.provider.value} V{self.version}"

    def fork_decode(self, kind: FileKind) -> FileKind | None:
        """How a fork proves its copy of a state file: by decoding it as `kind` where Spark wrote
        no sidecar, else (None) against the sidecar."""
        return None if self.sidecars else kind
