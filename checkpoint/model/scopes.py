"""What a checkpoint model holds, and how it was listed."""

from __future__ import annotations

from enum import StrEnum


class Scope(StrEnum):
    """What a model's `files` hold."""

    LISTING = "listing"  # every file of the checkpoint
    RECOVERY = "recovery"  # the logs and what recovery reads at `resolved_batches`


class Listing(StrEnum):
    """How `load_checkpoint` lists: one recursive listing, each state partition folder on its own
    and concurrently (object stores, where wall time is round trips), or whichever suits the
    backend (per partition on object stores, flat on local disk, where threads only contend for
    the GIL; measured in bench/gc_plan.py, figures in bench/README.md)."""

    FLAT = "flat"
    PER_PARTITION = "per_partition"
    AUTO = "auto"
