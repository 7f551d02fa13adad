"""Every Spark generation with format V2, proven by a restart under its own PySpark: checkpoints
that PySpark 4.0.5, 4.1.4 and 4.2.1 wrote (`testbed.generations.SCENARIOS`: an aggregation on a
delta-only chain, a join on Spark's own snapshots, transformWithStateInPandas) are compacted (4.1
and 4.2; 4.0 is refused) and cleaned by this release, forked (markers and rewritten schema paths),
and the join repartitioned (4.1 and 4.2; 4.0 is refused), then restarted under the Spark that
wrote them beside an untouched copy restarted the same way (docs/safety.md: write only what the
checkpoint's own Spark reads). Spark's default formats as each release writes them are compacted,
cleaned and forked and restarted the same way. The project's own Spark, 4.3, is proven so by the
rest of the suite.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from checkpoint.compaction.targets import CompactionPlanOptions, plan_compaction
from checkpoint.errors import CompactionRefused, RepartitionRefused
from checkpoint.model.head import load_head
from checkpoint.repartition import RepartitionOptions, repartition_checkpoint
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.storage import Storage
from testbed.cache import cache_home
from testbed.copying import copy_checkpoint
from testbed.generations import DEFAULT_SCENARIOS, RELEASES, SCENARIOS, restart_under
from testbed.restart import differences
from tests.support import damage
from tests.support.compacting import compact_unleased
from tests.support.files import files_of
from tests.support.forking import fork
from tests.support.planning import apply_unleased, plan_later

pytestmark = pytest.mark.slow


def _compact_and_clean(spark, path: Path, audit: Path, spark_4_0: bool) -> tuple[int, int]:
    """Compaction (refused on Spark 4.0, nothing written) and a cleanup that keeps two batches;
    returns how many stores were compacted and files deleted."""
    ckpt = load_head(str(path), recent=2)
    compacted = 0
    if spark_4_0:
        before = files_of(path)
        with pytest.raises(CompactionRefused, match="Nothing was written"):
            plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0))
        assert files_of(path) == before
    else:
        targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0)).targets
        outcomes = compact_unleased(spark, ckpt, targets)
        assert targets and all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
        compacted = len(outcomes)
    trail = AuditTrail(str(audit))
    plan = plan_later(path, audit=trail, retain_batches=2)
    result = apply_unleased(plan, Storage(str(path)), trail)
    assert not result.failed.files and result.deleted.files == plan.files
    return compacted, result.deleted.files


def _v2_runs(ports, spark, corpus: Path, work: Path, spark_4_0: bool) -> list[dict]:
    """`SCENARIOS` as the release wrote them: an untouched copy, one compacted and cleaned, its
    fork, and the join repartitioned; the runs that restart them."""
    runs, done = [], {}
    for name in SCENARIOS:
        here, copies = work / name, {}
        for copy in ("untouched", "changed", "repartitioned"):
            copies[copy] = copy_checkpoint(corpus / name / "checkpoint", here / copy)
            damage.before_the_last_upload(copies[copy])
        done[name] = _compact_and_clean(spark, copies["changed"], here / "audit", spark_4_0)
        fork(Storage(str(copies["changed"])), Storage(str(here / "forked")))
        copies["forked"] = here / "forked"
        if name == "join":
            trail = AuditTrail(str(here / "audit"))
            request = InPlace(Storage(str(copies["repartitioned"])), taken_at_once("tests"), trail)
            options = RepartitionOptions(8, ports.repartition, quiet_seconds=0)
            if spark_4_0:
                before = files_of(copies["repartitioned"])
                with pytest.raises(RepartitionRefused, match="metadata v2 .* with this release's Spark"):
                    repartition_checkpoint(request, options)
                assert files_of(copies["repartitioned"]) == before
            else:
                repartition_checkpoint(request, options)
        if name != "join" or spark_4_0:
            del copies["repartitioned"]
        # Spark 4.0's state data source cannot read format V2 (see testbed.restart): there the
        # rows the restarted query emits carry the comparison, every key's new aggregate for the
        # aggregation (each input file touches all 9 keys) and the join's matches against state.
        runs += [{"scenario": name, "scenario_dir": corpus / name, "checkpoint": path, "copy": copy,
                  "extra": here / "more-input", "read_state": not spark_4_0}
                 for copy, path in copies.items()]  # fmt: skip
    assert done["join"][1] > 0  # Spark's own older snapshots and changelogs below the window
    if not spark_4_0:
        assert done["long_chain"][0] == 4 and done["join"][0] > 0 and done["list_state"][0] > 0
    return runs


def _default_runs(spark, corpus: Path, work: Path) -> list[dict]:
    """`DEFAULT_SCENARIOS` (the HDFS-backed store on its own snapshots, RocksDB V1 with
    changelogs) as the release wrote them: read healthy, then an untouched copy, one compacted
    (the snapshot by this release's Spark provider, the zip by the rebuild), one cleaned to two
    batches, and a fork; the runs that restart them. Format V1 is read by every release's state
    reader."""
    from checkpoint.analysis.checks import Severity, validate

    runs = []
    for name in DEFAULT_SCENARIOS:
        here = work / name
        copies = {
            c: copy_checkpoint(corpus / name / "checkpoint", here / c)
            for c in ("untouched", "cleaned", "compacted")
        }
        ckpt = load_head(str(copies["compacted"]))
        targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=1, quiet_seconds=0)).targets
        outcomes = compact_unleased(spark, ckpt, targets)
        assert targets and all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
        head = load_head(str(copies["cleaned"]), strict=False)
        assert head.format_version == 1, name
        assert [f for f in validate(head).findings if f.severity == Severity.ERROR] == [], name
        trail = AuditTrail(str(here / "audit"))
        plan = plan_later(copies["cleaned"], audit=trail, retain_batches=2)
        result = apply_unleased(plan, Storage(str(copies["cleaned"])), trail)
        assert plan.files > 0 and not result.failed.files and result.deleted.files == plan.files
        # At the latest batch: restarted with its original input folder in a glob, PySpark 4.0.5's
        # file source reads every file again (an untouched copy too), so a fork at an earlier
        # batch would replay a different history (forks at earlier batches: test_default_formats).
        fork(Storage(str(copies["untouched"])), Storage(str(here / "forked")))
        copies["forked"] = here / "forked"
        runs += [{"scenario": name, "scenario_dir": corpus / name, "checkpoint": path, "copy": copy,
                  "extra": here / "more-input"} for copy, path in copies.items()]  # fmt: skip
    return runs


def _compared(runs: list[dict], restarted: list[dict]) -> list[tuple[str, str, list]]:
    """Each changed copy's restart against its untouched copy's: (scenario, copy, differences)."""
    pairs = list(zip(runs, restarted, strict=True))
    control = {run["scenario"]: result for run, result in pairs if run["copy"] == "untouched"}
    return [(run["scenario"], run["copy"], differences(result, control[run["scenario"]]))
            for run, result in pairs if run["copy"] != "untouched"]  # fmt: skip


@pytest.fixture(scope="module", params=sorted(RELEASES.values()))
def generation(request, ports, spark, written_by, tmp_path_factory):
    """(version, the format V2 copies compared, the default formats' copies compared): what a
    release wrote, changed by this release, then restarted under that release beside untouched
    copies, both formats in one of its JVMs (starting one is much of the cost)."""
    version = request.param
    spark_4_0 = version.startswith("4.0.")
    work = tmp_path_factory.mktemp(f"generation-{version}")
    v2 = _v2_runs(ports, spark, written_by(version), work / "v2", spark_4_0)
    defaults = _default_runs(spark, written_by(version, defaults=True), work / "defaults")
    # Spark 4.0's RocksDB stores keep the checkpoint format of the first query that loads one for
    # the JVM's life ("Expected v2, but found v1"): there each format restarts in a JVM of its own.
    batches = [v2, defaults] if spark_4_0 else [v2 + defaults]
    restarted = []
    for i, batch in enumerate(batches):
        restarted += restart_under(cache_home(), version, batch, work / f"restarts-{i}")
    yield version, _compared(v2, restarted[: len(v2)]), _compared(defaults, restarted[len(v2) :])
    shutil.rmtree(work, ignore_errors=True)


def test_what_this_release_writes_restarts_under_the_spark_that_wrote_the_checkpoint(generation) -> None:
    """Format V2: compacted (refused on 4.0) and cleaned, forked, the join repartitioned (refused
    on 4.0), each restarting like its untouched copy."""
    version, compared, _ = generation
    assert [c for c in compared if c[2]] == []
    assert len(compared) == 2 * len(SCENARIOS) + (0 if version.startswith("4.0.") else 1)


def test_default_formats_compacted_cleaned_and_forked_restart_under_the_spark_that_wrote_them(
    generation,
) -> None:
    """Spark's default formats: compacted, cleaned and forked, each restarting like its untouched
    copy."""
    _, _, compared = generation
    assert [c for c in compared if c[2]] == [] and len(compared) == 3 * len(DEFAULT_SCENARIOS)
