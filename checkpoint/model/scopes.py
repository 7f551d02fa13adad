"""What a checkpoint model holds, and how it was listed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from checkpoint.format import Classified, is_number


class Scope(StrEnum):
    """What a model's `files` hold."""

    LISTING = "listing"  # every file of the checkpoint
    RECOVERY = "recovery"  # the logs and what recovery reads at `resolved_batches`


class Logs(StrEnum):
    """Which of the retained offset and commit files a head-first load reads. Spark keeps 100
    batches of each (`minBatchesToRetain`); its restart reads the newest commit and the newest two
    offsets. Every retained file is listed either way: gaps are seen by name."""

    ALL = "all"  # every one: validation checks the two logs against each other, file by file
    RECOVERY = "recovery"  # what a restart reads, and the asked batches': a look's, a ranking's


class Listing(StrEnum):
    """How `load_checkpoint` lists: one recursive listing, each state partition folder on its own
    and concurrently (object stores, where wall time is round trips), or whichever suits the
    backend (per partition on object stores, flat on local disk, where threads only contend for
    the GIL; measured in bench/gc_plan.py, figures in bench/README.md)."""

    FLAT = "flat"
    PER_PARTITION = "per_partition"
    AUTO = "auto"


@dataclass(frozen=True)
class StateFolders:
    """What `state/<op>` holds on disk, as far as it was listed: its partition folders, and the
    store folders (`<part>/<store>/`) seen inside them; None where that was not listed. What the
    logs and the operator metadata say about the stores is checked against it."""

    partitions: frozenset[int] | None = None
    stores: frozenset[str] | None = None


def state_folders_of(listed: Iterable[Classified]) -> dict[int, StateFolders]:
    """What a full listing shows under `state/`: every operator, partition and store folder."""
    partitions: dict[int, set[int]] = defaultdict(set)
    stores: dict[int, set[str]] = defaultdict(set)
    for what in listed:
        parts = what.rel.split("/", 2)
        if len(parts) < 3 or parts[0] != "state" or not is_number(parts[1], 10):
            continue
        op = int(parts[1])
        partitions[op]  # an operator folder with nothing but metadata is still one
        if what.partition is not None:
            partitions[op].add(what.partition)
            if what.store is not None and what.store != "default":
                stores[op].add(what.store)
    return {op: StateFolders(frozenset(parts), frozenset(stores[op])) for op, parts in partitions.items()}
