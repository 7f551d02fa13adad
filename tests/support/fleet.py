"""A fleet of real checkpoints for the fleet view's tests: healthy with a long chain, orphans to
reclaim, a broken chain, lineage headers at 69 % and 85 % of the cap; all stopped, dated past the
grace period."""

from __future__ import annotations

from pathlib import Path

from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from tests.support import damage

NEAR, OVER = 45_000, 56_000  # lineage header bytes: 69 % and 85 % of the cap


def _copy(corpus, name: str, dest: Path, edit=None) -> None:
    copy_checkpoint(corpus[name], dest)
    if edit is not None:
        edit(dest)


def _committed(path: Path) -> Path:
    return path / damage.lineage_of(path).committed_file.rel


def fleet_of(corpus, root: Path) -> Path:
    """The fleet, written under `root`."""
    _copy(corpus, "long_chain", root / "chain")
    _copy(corpus, "two_actions", root / "orders")
    _copy(corpus, "long_chain", root / "teams" / "broken",
          lambda p: damage.remove(p / damage.lineage_of(p).chain[9].rel))  # fmt: skip
    _copy(
        corpus, "long_chain", root / "teams" / "near-cap", lambda p: damage.pad_lineage(_committed(p), NEAR)
    )
    _copy(corpus, "long_chain", root / "teams" / "at-cap", lambda p: damage.pad_lineage(_committed(p), OVER))
    date_to(root, 8 * 3600)  # stopped, not dormant, however old the corpus
    return root
