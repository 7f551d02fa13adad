"""A checkpoint in Spark's default formats carried to RocksDB format V2 with its state: the guarded
flow and its door (`flow`), and one store's recovery written as a V2 snapshot (`state`)."""

from checkpoint.migrate.flow import (
    MigrationOptions,
    MigrationPorts,
    MigrationResult,
    Placement,
    ReadSide,
    StoreRead,
    migrate_checkpoint,
    store_failed,
)
from checkpoint.migrate.state import StoreJob, StoreWritten

__all__ = ["MigrationOptions", "MigrationPorts", "MigrationResult", "Placement", "ReadSide", "StoreJob",
           "StoreRead", "StoreWritten", "migrate_checkpoint", "store_failed"]  # fmt: skip
