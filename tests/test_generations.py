"""Every Spark generation with format V2, proven by a restart under its own PySpark: checkpoints
that PySpark 4.0.5, 4.1.4 and 4.2.1 wrote (an aggregation on a delta-only chain, a join on Spark's
own snapshots) are compacted (4.1 and 4.2; 4.0 is refused) and cleaned by this release, then
restarted under the Spark that wrote them beside an untouched copy restarted the same way
(safety.md: write only what the checkpoint's own Spark reads). The project's own Spark, 4.3,
is proven the same way by the rest of the suite.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from checkpoint.audit import AuditTrail
from checkpoint.compaction import CompactionRefused, plan_compaction
from checkpoint.gc_apply import apply_plan
from checkpoint.head import load_head
from checkpoint.storage import Storage
from jobs.compact import run_compaction
from testbed.copying import copy_checkpoint
from testbed.corpus import cache_home
from testbed.generations import RELEASES, SCENARIOS, restart_under
from testbed.restart import differences
from tests.support.planning import plan_of

pytestmark = pytest.mark.slow


def _files(path: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(path).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in path.rglob("*") if p.is_file()}  # fmt: skip


def _before_the_last_upload(checkpoint: Path) -> None:
    """Each store's snapshot of its newest version taken away, as before the maintenance round
    that uploads it: how Spark left a store is timing, and one that loads from its own snapshot
    has no chain to compact. The newest changelog's lineage names an older base, which stays."""
    for store in {p.parent for p in checkpoint.glob("state/**/*.changelog")}:
        newest = max(int(p.name.split("_")[0]) for p in store.glob("*.changelog"))
        for path in store.glob(f"{newest}_*.zip"):  # with Spark's sidecar and Hadoop's checksum
            for gone in (path, path.with_name(path.name + ".crc"), path.with_name(f".{path.name}.crc")):
                gone.unlink(missing_ok=True)


@pytest.mark.parametrize("version", sorted(RELEASES.values()))
def test_compacted_and_cleaned_checkpoints_restart_under_the_spark_that_wrote_them(
    spark, written_by, tmp_path, version
) -> None:
    corpus = written_by(version)
    runs, compacted, deleted = [], {}, {}
    for name in SCENARIOS:
        changed, untouched = (copy_checkpoint(corpus / name / "checkpoint", tmp_path / name / copy)
                              for copy in ("changed", "untouched"))  # fmt: skip
        for path in (changed, untouched):
            _before_the_last_upload(path)
        ckpt = load_head(str(changed), recent=2)
        if version.startswith("4.0."):
            before = _files(changed)
            with pytest.raises(CompactionRefused, match="Nothing was written"):
                plan_compaction(ckpt, min_chain=1, quiet_seconds=0)
            assert _files(changed) == before
        else:
            targets, _ = plan_compaction(ckpt, min_chain=1, quiet_seconds=0)
            outcomes = run_compaction(spark, ckpt, targets)
            assert targets and all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
            compacted[name] = len(outcomes)
        audit = AuditTrail(str(tmp_path / name / "audit"))
        plan = plan_of(changed, audit=audit, retain_batches=2, now=time.time() + 7 * 3600)
        result = apply_plan(plan, Storage(str(changed)), audit)
        assert not result.failed.files and result.deleted.files == plan.files
        deleted[name] = result.deleted.files
        extra = tmp_path / name / "more-input"
        # Spark 4.0's state data source cannot read format V2 (see testbed.restart): there the
        # rows the restarted query emits carry the comparison, every key's new aggregate for the
        # aggregation (each input file touches all 9 keys) and the join's matches against state.
        runs += [{"scenario": name, "scenario_dir": corpus / name, "checkpoint": p, "extra": extra,
                  "read_state": not version.startswith("4.0.")} for p in (changed, untouched)]  # fmt: skip
    assert deleted["join"] > 0  # Spark's own older snapshots and changelogs below the window
    if not version.startswith("4.0."):
        assert compacted["long_chain"] == 4 and compacted["join"] > 0
    restarted = restart_under(cache_home(), version, runs, tmp_path / "restarts")
    for name, changed, untouched in zip(SCENARIOS, restarted[::2], restarted[1::2], strict=True):
        assert differences(changed, untouched) == [], (version, name)
