"""The file sources' logs against the newest offsets: a restart reads the entries from each log's
newest compaction to the batch's own (`source_log_gaps`), and fails on a missing one, which no
check of the commit and offset logs sees."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from checkpoint.analysis.findings import F, Finding, finding
from checkpoint.format import FileKind, source_log_gaps
from checkpoint.model import Checkpoint

_COMPACT = ".compact"


def source_findings(ckpt: Checkpoint) -> Iterable[Finding]:
    """SOURCE_LOG_MISSING for each file source whose log lacks an entry a restart reads. From the
    model's files alone: a full listing holds every source's log, and a head-first load lists the
    logs of the file sources the newest offsets name."""
    newest = ckpt.newest_offsets
    if newest is None or not newest.file_sources:
        return
    listed: dict[str, dict[int, bool]] = defaultdict(dict)
    for f in ckpt.files:
        if f.kind == FileKind.SOURCE_LOG and f.what.batch is not None:
            folder, name = f.rel.rsplit("/", 1)
            entries = listed[folder]
            entries[f.what.batch] = entries.get(f.what.batch, False) or name.endswith(_COMPACT)
    for index, log_offset in newest.file_sources:
        folder = f"sources/{index}"
        gaps = source_log_gaps(listed.get(folder, {}), log_offset)
        if not gaps:
            continue
        spans = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps)
        what = "entry" if len(gaps) == 1 and gaps[0][0] == gaps[0][1] else "entries"
        yield finding(
            F.SOURCE_LOG_MISSING,
            ckpt.storage.full(folder),
            f"file source {index}'s log is missing {what} {spans}, which a restart reads (batch "
            f"{newest.batch}'s offsets name its entry {log_offset}): Spark fails to start the query. "
            "Restore the log from a backup, or fork the checkpoint at an older batch",
        )
