"""The fleet of issue 49 on a local disk: 10,000 synthetic checkpoints (`testbed.synthetic`, the real
naming) in 40 teams, for the commit sensor's test at scale. Twelve of them, spread over the fleet,
carry a chain of 12 versions that never saw a snapshot; the others hold 3 versions.

It is written once per version of this module into the cache and read in place: the sensor only
reads. Written into each run's temporary folder, its 240,673 files (0.8 GiB on disk) made the
test take 88 s in a cold run, and their removal 99 s more as it passed.

    python -m testbed.fleet OUT
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from testbed import synthetic
from testbed.cache import MANIFEST, cache_home, ensure_generated

# 2: the crossing checkpoints' chains hold no empty changelog; 3: each source's log (synthetic v2)
FLEET_VERSION = 3
COUNT = 10_000
TEAMS = 40
CROSSING = frozenset(f"query-{i:05d}" for i in range(417, COUNT, COUNT // 12))


def _generate(out: Path) -> None:
    for i in range(COUNT):
        name = f"query-{i:05d}"
        shape = (12, 1000) if name in CROSSING else (3, 5)  # (versions, a snapshot every)
        files = synthetic.iter_files(1, shape[0], window=3, snapshot_every=shape[1])
        synthetic.write_local(out / "fleet" / f"team-{i % TEAMS:02d}" / name, files)
    (out / MANIFEST).write_text(json.dumps({"fleet_version": FLEET_VERSION, "checkpoints": COUNT}))


def cache_dir() -> Path:
    return cache_home() / f"fleet-v{FLEET_VERSION}"


def ensure_fleet() -> Path:
    """The fleet's root folder (the checkpoints are `<team>/<query>` under it), written first when
    the cache has none; the fleets of earlier versions are then removed (0.8 GiB each)."""
    what = f"the fleet of {COUNT:,} checkpoints"
    if (cache_dir() / MANIFEST).exists():
        return cache_dir() / "fleet"
    root = ensure_generated(cache_dir(), ["-m", "testbed.fleet"], what) / "fleet"
    for old in superseded(cache_home()):
        shutil.rmtree(old, ignore_errors=True)
    return root


def superseded(home: Path) -> list[Path]:
    """The cache's fleets of a version before this module's."""
    versions = (
        (folder, folder.name.removeprefix("fleet-v")) for folder in home.glob("fleet-v*") if folder.is_dir()
    )
    return sorted(folder for folder, n in versions if n.isdigit() and int(n) < FLEET_VERSION)


if __name__ == "__main__":
    _generate(Path(sys.argv[1]))
