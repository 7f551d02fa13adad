"""The file sources' logs against the newest offsets: a restart reads the entries from each log's
newest compaction to the batch's own (`source_log_gaps`), and fails on a missing or empty one,
which no check of the commit and offset logs sees."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from checkpoint.analysis.findings import F, Finding, finding, spans_text
from checkpoint.format import FileKind, source_log_gaps
from checkpoint.model import Checkpoint

_SHOWN = 5  # source lines named in one finding, of a forged offsets file's thousands


def source_logs(ckpt: Checkpoint) -> dict[str, dict[str, int]]:
    """{folder: {file name: size}} of each `sources/<folder>` the model's files show, a log or
    anything else in its place (a file, a link): a full listing holds every source's, and a
    head-first load lists those the newest offsets may name."""
    logs: dict[str, dict[str, int]] = defaultdict(dict)
    for f in ckpt.files:
        parts = f.rel.split("/", 2)
        if parts[0] == "sources" and len(parts) > 1:
            log = logs[parts[1]]
            if f.kind == FileKind.SOURCE_LOG:
                log[parts[2]] = f.info.size
    return logs


def source_findings(ckpt: Checkpoint) -> Iterable[Finding]:
    """SOURCE_LOG_MISSING for each file source whose log lacks an entry a restart reads (the first
    few named, the others counted). A line whose folder is not known (a source read twice) is
    checked against every folder it may be (`OffsetEntry.may_hold`): one that holds its entries is
    enough, so a self-union is never taken for damage."""
    newest = ckpt.newest_offsets
    if newest is None or not newest.file_sources:
        return
    # Only folders a line may name: a head-first load lists no other, and a full listing's must not
    # decide otherwise.
    logs = {folder: log for folder, log in source_logs(ckpt).items() if newest.may_name(folder)}
    unplaced = []
    gapped: dict[tuple[str, int], bool] = {}  # (folder, entry): a forged file repeats one line

    def lacks(folder: str, log_offset: int) -> bool:
        if (folder, log_offset) not in gapped:
            gapped[folder, log_offset] = bool(source_log_gaps(logs[folder], log_offset))
        return gapped[folder, log_offset]

    lacking = []
    for line, log_offset in newest.file_sources:
        folder = newest.source_folder(line, logs)
        if folder is None:
            if all(lacks(f, log_offset) for f in logs if newest.may_hold(line, f)):
                unplaced.append((line, log_offset))
        elif gaps := source_log_gaps(logs.get(folder, {}), log_offset):
            lacking.append((folder, log_offset, gaps))
    for folder, log_offset, gaps in lacking[:_SHOWN]:
        spans = spans_text(gaps)
        what = "entry" if len(gaps) == 1 and gaps[0][0] == gaps[0][1] else "entries"
        yield finding(
            F.SOURCE_LOG_MISSING,
            ckpt.storage.full(f"sources/{folder}"),
            f"file source {folder}'s log has no readable {what} {spans} (missing, empty, or not under "
            "the name its compaction interval gives), which a restart reads (batch "
            f"{newest.batch}'s offsets name its entry {log_offset}): Spark fails to start the query. "
            "Restore them from a backup",
        )
    if len(lacking) > _SHOWN:  # a forged offsets file names any number of sources
        yield finding(
            F.SOURCE_LOG_MISSING,
            ckpt.storage.full("sources"),
            f"and {len(lacking) - _SHOWN} more file sources' logs lack entries a restart reads (batch "
            f"{newest.batch}'s offsets name them). Spark fails to start the query. Restore them from a "
            "backup",
        )
    if unplaced:
        shown = ", ".join(f"line {line} (entry {n})" for line, n in unplaced[:_SHOWN])
        more = f" and {len(unplaced) - _SHOWN} more" if len(unplaced) > _SHOWN else ""
        yield finding(
            F.SOURCE_LOG_MISSING,
            ckpt.storage.full("sources"),
            f"batch {newest.batch}'s offsets name file source entries no log under sources/ holds whole: "
            f"{shown}{more}. Spark fails to start the query. Restore them from a backup",
        )
