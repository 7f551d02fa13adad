from checkpoint.migrate.flow import MigrationResult, Placement, StoreRead, migrate, store_failed
from checkpoint.migrate.state import StoreJob, StoreWritten

__all__ = ["MigrationResult", "Placement", "StoreJob", "StoreRead", "StoreWritten", "migrate", "store_failed"]
