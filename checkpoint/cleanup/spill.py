"""The plan's spill: candidates written to local files as partitions are decided, and the SSTs held
for the live floor decided once every partition has given its oldest; memory is one chunk."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections import Counter

from checkpoint.cleanup.decide import Decided
from checkpoint.cleanup.rules import (
    Kept,
)
from checkpoint.cleanup.totals import Totals
from checkpoint.format import FileKind, classify
from checkpoint.progress import Progress, report
from checkpoint.safety import PlannedFile

log = logging.getLogger(__name__)


_PROGRESS_EVERY = 50_000  # files seen between progress lines


class Spill:
    """Candidates as manifest lines in a local file, totals in memory. On a live query, the SSTs
    whose fate waits for the oldest retained SST of every partition (and their sidecars) go to a
    second file, decided in `finish`."""

    def __init__(self, tmp: str) -> None:
        self._lines_path = os.path.join(tmp, "candidates.jsonl")
        self.lines = open(self._lines_path, "w")  # closed in finish, or on the way out
        # Partitions decided apart: each one's lines file, in folder order. Named, not copied
        # here: the manifest is assembled from them once (at 10M files, 1.9 GB fewer to write).
        self._parts: list[str] = []
        self._held_path = os.path.join(tmp, "held.jsonl")
        self.held = open(self._held_path, "w")  # closed in finish, or on the way out
        self.retained = self.seen = 0
        self.by_reason, self.by_store = Totals(), Totals()
        self.kept: Counter[str] = Counter()
        self.floor: float | None = None  # the oldest SST any retained zip lists
        self.partition_files: dict[str, int] = {}

    @property
    def files(self) -> int:  # every candidate has one reason: the totals by reason are the whole
        return sum(entry["files"] for entry in self.by_reason.as_dict().values())

    @property
    def total_bytes(self) -> int:
        return sum(entry["bytes"] for entry in self.by_reason.as_dict().values())

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.lines.close()
        self.held.close()

    def partition(self, folder: str, decided: Decided) -> None:
        self.retained += decided.retained
        self.partition_files[folder] = decided.listed
        self.kept.update(decided.kept)
        oldest = decided.oldest_retained_sst
        if oldest is not None:
            self.floor = oldest if self.floor is None else min(self.floor, oldest)
        if decided.apart is not None:
            lines, held = decided.apart
            self._parts.append(lines)
            # As bytes: ASCII lines, not decoded and encoded again
            self.held.flush()
            with open(held, "rb") as part:
                shutil.copyfileobj(part, self.held.buffer)
            os.remove(held)
        self.by_reason.merge(decided.by_reason)
        self.by_store.merge(decided.by_store)
        before, self.seen = self.seen, self.seen + decided.listed
        if self.seen // _PROGRESS_EVERY > before // _PROGRESS_EVERY:
            seen = Progress("files planned", self.seen, None)
            report(log, seen, "%s: %d files seen, %d candidates (%d bytes)", folder, self.seen, self.files,
                   self.total_bytes)  # fmt: skip

    @property
    def line_files(self) -> list[str]:
        """The manifest's candidate lines, in order: each partition's decided apart (in a pool, or
        before a plan knows whether it starts one), then this spill's own file (the partitions
        decided here, and the held SSTs decided last)."""
        return [*self._parts, self._lines_path]

    def _add(self, planned: PlannedFile) -> None:
        self.lines.write(planned.line())
        self.by_reason.add(planned.reason, planned.size)
        self.by_store.add(planned.store, planned.size)

    def finish(self) -> None:
        """Decides the held SSTs against the oldest retained SST of the whole checkpoint (none:
        every such SST stays), as docs/safety.md asks of a live query."""
        self.held.close()
        with open(self._held_path) as held:
            for line in held:
                row = json.loads(line)
                planned = PlannedFile.parse(row)
                if self.floor is not None and row["sst_mtime"] < self.floor:
                    self._add(planned)
                elif classify(planned.path).kind == FileKind.SST:
                    self.kept[Kept.LIVE_RECENT_SST.value] += 1
                else:
                    self.kept[Kept.MAIN_KEPT.value] += 1
        self.lines.close()  # flushed: the manifest is assembled from it
