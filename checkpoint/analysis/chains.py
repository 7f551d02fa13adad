"""What each store's replay chain at a batch says of itself (`checkpoint.model.lineage`): the
committed file there, the lineage header of its changelog, the files the chain misses, its length.
Where the committed version has its own zip, recovery reads nothing of its changelog, so what is
wrong with that changelog warns instead of blocking (docs/findings.md)."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from checkpoint.analysis.findings import Category, Finding, FindingCode
from checkpoint.analysis.findings import finding as _finding
from checkpoint.errors import (
    NotARegularFileError,
    OutsideCheckpointError,
    OversizedFileError,
    UnknownFormatVersionError,
    UntrustedFileError,
)
from checkpoint.format import LINEAGE_HEADER_CAP
from checkpoint.model import Checkpoint, StoreId, StoreLineage

# What the door refused to open, by why: the two every file problem is told by (`checks`), then a
# file past its bound, then (for `next`) any other refusal.
REFUSALS = (
    (OutsideCheckpointError, FindingCode.FILE_OUTSIDE_CHECKPOINT),
    (NotARegularFileError, FindingCode.NOT_A_REGULAR_FILE),
)
_REFUSED_CODES = (
    *REFUSALS,
    (OversizedFileError, FindingCode.FILE_OVER_ITS_BOUND),
    (UntrustedFileError, FindingCode.NOT_A_REGULAR_FILE),
)


def _store_path(ckpt: Checkpoint, sid: StoreId) -> str:
    rel = f"state/{sid.operator}/{sid.partition}" + ("" if sid.store == "default" else f"/{sid.store}")
    return ckpt.storage.full(rel)


def chain_findings(
    ckpt: Checkpoint, entry: StoreLineage, long_chain: int, header_cap_ratio: float
) -> Iterable[Finding]:
    """What the replay chain of one store at a batch says of itself: its committed file, its lineage
    header, the files it misses, its length."""
    where = _store_path(ckpt, entry.store)
    name = f"version {entry.version}" + (f" id {entry.unique_id}" if entry.unique_id else "")
    kinds = ckpt.states.files
    if entry.committed_file is None:
        yield _finding(
            FindingCode.COMMITTED_FILE_MISSING,
            where,
            f"{name} (batch {entry.batch}) has no {kinds.step.value} and no {kinds.base.value}",
        )
        return
    path = ckpt.storage.full(entry.committed_file.rel)
    if isinstance(entry.header_error, UnknownFormatVersionError):  # blocks wherever it lies
        failed = entry.header_error.path or path
        yield _finding(FindingCode.UNKNOWN_FORMAT_VERSION, failed, str(entry.header_error), Category.LINEAGE)
        return
    judged = _header_problems(entry, header_cap_ratio)
    if entry.loads_own_base:
        error = entry.header_error
        if error is not None and entry.header_blocks:  # the door refused it (an unknown version: above)
            refused = (code for kind, code in _REFUSED_CODES if isinstance(error, kind))
            yield _finding(next(refused), error.path or path, str(error))
            return
        # Recovery reads nothing of the version's changelog (`loads_own_base`): what is wrong with
        # it warns, once. Spark 4.2 and later would read its lineage only to fall back from a zip
        # that fails to load.
        # A long header is no damage there: loading the zip starts the lineage again.
        judged = [j for j in judged if j[0] != FindingCode.LINEAGE_HEADER_NEAR_CAP]
        if judged:
            changelog = f"{where}/{kinds.name(kinds.step, entry.version, entry.unique_id)}"
            zip_name = entry.committed_file.rel.rsplit("/", 1)[-1]
            yield _finding(
                FindingCode.CHANGELOG_BESIDE_ZIP_DAMAGED,
                changelog,
                f"{judged[0][1]}; recovery loads {zip_name} and reads none of this changelog",
            )
        return
    for code, message in judged:
        yield _finding(code, path, message)
    if entry.header_error is not None:
        return
    for version, uid in entry.missing:
        missing = kinds.name(kinds.step, version, uid)
        yield _finding(
            FindingCode.REPLAY_CHAIN_BROKEN, where, f"{missing} is missing from the replay chain of {name}"
        )
    if entry.no_base:
        head = entry.header.lineage[0].version if entry.header and entry.header.lineage else "?"
        yield _finding(
            FindingCode.REPLAY_CHAIN_NO_BASE,
            path,
            f"no zip exists for any version of the lineage (which starts at {head}): {name} cannot be loaded",
        )
    if entry.chain_length >= long_chain:
        yield _finding(
            FindingCode.LONG_REPLAY_CHAIN,
            path,
            f"recovery replays {entry.chain_length} {kinds.step.value}s ({entry.replay_bytes} bytes) "
            f"for {name}",
        )


def _header_problems(entry: StoreLineage, cap_ratio: float) -> list[tuple[FindingCode, str]]:
    """What is wrong with the committed changelog's header: that it cannot be read, or what its
    lineage says."""
    if entry.header_error is not None:
        return [(FindingCode.CHANGELOG_UNREADABLE, str(entry.header_error))]
    if entry.header is None or entry.header.lineage is None:
        return []
    found = []
    versions = [e.version for e in entry.header.lineage]
    if any(b != a + 1 for a, b in pairwise(versions)):
        found.append(
            (
                FindingCode.LINEAGE_NOT_CONTIGUOUS,
                f"lineage versions are not contiguous: {_spans_of(versions)}",
            )
        )
    elif (versions[-1] if versions else 0) != entry.version - 1:
        end = versions[-1] if versions else "none"
        found.append((FindingCode.LINEAGE_BAD_END, f"lineage ends at version {end}, not {entry.version - 1}"))
    if entry.header_cap_ratio >= cap_ratio:
        found.append(
            (
                FindingCode.LINEAGE_HEADER_NEAR_CAP,
                f"lineage header is {entry.lineage_header_bytes} bytes, {entry.header_cap_ratio:.0%} of the "
                f"{LINEAGE_HEADER_CAP}-byte cap: the query dies when it passes it; compact this store now",
            )
        )
    return found


def _spans_of(versions: list[int]) -> str:
    return (
        ", ".join(str(v) for v in versions) if len(versions) <= 12 else f"{versions[:6]} ... {versions[-6:]}"
    )
