"""transformWithState's expired state: what a TTL expired, read from a store's families (`ttl`),
reported for a checkpoint and purged offline from a stopped query (`purge`: compaction's rebuild,
the eviction Spark would do at its next batch, the result checked and published), each store in
this process or, through the options' `run` port, a Spark task of its own (`jobs.expiry`)."""

from checkpoint.errors import PurgeRefused
from checkpoint.expiry.purge import (
    LOOKED,
    NOTHING,
    OWN_SNAPSHOT,
    PURGED,
    ExpiredState,
    PurgeOptions,
    StorePurge,
    StorePurges,
    StoreTask,
    expired_report,
    purge_expired,
)
from checkpoint.expiry.ttl import Expired

__all__ = [
    "LOOKED",
    "NOTHING",
    "OWN_SNAPSHOT",
    "PURGED",
    "Expired",
    "ExpiredState",
    "PurgeOptions",
    "PurgeRefused",
    "StorePurge",
    "StorePurges",
    "StoreTask",
    "expired_report",
    "purge_expired",
]
