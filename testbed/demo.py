"""The main job on the embedded default: real streaming queries write checkpoints locally (RocksDB
format V2, and Spark's defaults: the HDFS-backed store), then one full maintenance pass runs
through Dagster (audit with blocking checks, compaction, orphan cleanup with its audit trail), the
HDFS-backed checkpoint is migrated to RocksDB V2 and its copy maintained at once, all into the
project's Dagster instance so the UI shows the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

from testbed.cache import MANIFEST
from testbed.clock import date_back, date_to

DEMO_SCENARIOS = ("long_chain", "snapshots", "killed", "join", "list_state", "two_actions")
# Spark's own defaults, which most fleets hold: the HDFS-backed store, maintained, then migrated.
DEFAULTS_SCENARIOS = ("hdfs_agg",)
PROJECT = Path(__file__).resolve().parent.parent
# The demo's checkpoints were just written; dating them back is the demo's stand-in for time
# passing, so that the cleanup's grace period (6 h) has run out and orphans really are deleted.
AGE_SECONDS = 8 * 3600


def _generate(out: Path) -> bool:
    """Runs the generator in a child process, showing its progress lines; Spark's and PySpark's
    chatter goes to a log. One process and one JVM for both formats: two side by side on two cores
    took 129 s where one after another in one JVM takes about 100."""
    log_path = out.parent / "generate.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-u", "-m", "testbed.demo", "--generate", str(out)]
    with (
        open(log_path, "w") as log,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        for line in proc.stdout or ():
            log.write(line)
            if line.startswith("corpus:"):
                print("  " + line.rstrip(), flush=True)
    if proc.returncode != 0 or not (out / MANIFEST).exists():
        print(
            f"demo: generating the checkpoints failed (exit {proc.returncode}); see {log_path}",
            file=sys.stderr,
        )
        return False
    return True


def _copy_generated(corpora: list[Path], out: Path) -> None:
    """The demo's scenarios copied from corpora the same queries already wrote (the suite's cached
    `testbed.corpus` and `testbed.defaults`), their files' times kept: the suite's test of the
    demo, which proves the maintenance pass, not the queries again."""
    from testbed.copying import naming_itself

    found: dict[str, Path] = {}
    for corpus in corpora:
        found.update((name, corpus) for name in json.loads((corpus / MANIFEST).read_text())["scenarios"])
    wanted = (*DEMO_SCENARIOS, *DEFAULTS_SCENARIOS)
    missing = [name for name in wanted if name not in found]
    if missing:
        raise SystemExit(f"demo: no scenario {', '.join(missing)} in {', '.join(map(str, corpora))}")
    out.mkdir(parents=True)
    for name in wanted:
        shutil.copytree(found[name] / name, out / name, symlinks=True)
        for checkpoint in (out / name).glob("checkpoint*"):
            naming_itself(checkpoint)  # transformWithState's metadata names its schema files by path


def _scenarios():
    from testbed.corpus import SCENARIOS
    from testbed.defaults import DEFAULT_SCENARIOS

    wanted = (*DEMO_SCENARIOS, *DEFAULTS_SCENARIOS)
    return tuple(s for s in (*SCENARIOS, *DEFAULT_SCENARIOS) if s.name in wanted)


def _metadata(result, asset: str) -> dict:
    mats = list(result.asset_materializations_for_node(asset))
    return {k: v.value for k, v in mats[0].metadata.items()} if mats else {}


def _maintain(defs, instance, key: str) -> dict:
    """One maintenance run of one checkpoint, executed by Dagster; what the report needs from it."""
    from assets.cleanup import APPLY_TAG

    job = defs.resolve_job_def("checkpoint_maintenance")
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # the report says it shorter
    result = job.execute_in_process(
        partition_key=key, instance=instance, tags={APPLY_TAG: "true"}, raise_on_error=False, run_config=quiet
    )
    checks = result.get_asset_check_evaluations()
    codes = (str(e.metadata["codes"].value) for e in checks if "codes" in e.metadata)
    findings = sorted({c for text in codes for c in text.split(", ") if c != "none"})
    return {
        "run_id": result.run_id,
        "success": result.success,
        "findings": findings,
        "blocked": [e.check_name for e in checks if not e.passed and e.severity.value == "ERROR"],
        "compaction": _metadata(result, "checkpoint_compaction"),
        "plan": _metadata(result, "checkpoint_orphan_plan"),
        "cleanup": _metadata(result, "checkpoint_orphan_cleanup"),
    }


def _report_line(key: str, r: dict) -> list[str]:
    from checkpoint.analysis import human_bytes

    c, plan, clean = r["compaction"], r["plan"], r["cleanup"]
    lines = [f"  {key}  ({'ok' if r['success'] else 'FAILED'}, run {r['run_id'][:8]})"]
    lines.append(f"    findings: {', '.join(r['findings']) or 'none'}")
    if r["blocked"]:
        lines.append(f"    blocked by: {', '.join(r['blocked'])} (nothing was changed)")
    if c.get("stores_compacted"):
        lines.append(
            f"    compaction: {c['stores_compacted']} stores compacted, longest replay chain "
            f"{c['max_chain_before']} -> {c['max_chain_after']}"
        )
    elif c:
        skipped = c["stores_skipped"]
        lines.append(f"    compaction: nothing to do ({skipped} stores skipped; why is in the run)")
    if plan:
        lines.append(f"    orphans: {plan['files']} files, {human_bytes(plan['bytes'])}")
    if clean.get("applied") and clean["deleted_files"] + clean["failed_files"]:
        lines.append(
            f"    reclaimed: {clean['deleted_files']} files, {human_bytes(clean['deleted_bytes'])}"
            f" ({clean['failed_files']} failed); audit trail: {clean['outcomes']}"
        )
    return lines


def _migrate(defs, instance, out: Path, keys: list[str]) -> tuple[str | None, str]:
    """The HDFS-backed checkpoint carried to RocksDB format V2 with its state, by the
    `migrate_checkpoint` job (what the Launchpad runs); its partition added as discovery would."""
    from assets.partitions import CHECKPOINTS, partition_key

    source = next(k for k in keys if k.startswith(f"demo:{DEFAULTS_SCENARIOS[0]}/"))
    rel = f"migrated/{DEFAULTS_SCENARIOS[0]}"
    print(f"demo: migrating {source} to RocksDB format V2 ...", flush=True)
    t = time.monotonic()
    config = {"ops": {"migrate": {"config": {"source_partition": source, "destination": str(out / rel)}}},
              "loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # fmt: skip
    result = defs.resolve_job_def("migrate_checkpoint").execute_in_process(
        instance=instance, run_config=config, raise_on_error=False
    )
    print(f"  {source} -> demo:{rel}: {time.monotonic() - t:.0f} s", flush=True)
    if not result.success:
        return None, f"  {source}  migration FAILED (run {result.run_id[:8]}); nothing was changed in it"
    key = partition_key("demo", rel)
    instance.add_dynamic_partitions(CHECKPOINTS, [key])
    run = result.run_id[:8]
    return key, f"    migrated from {source} to RocksDB format V2 (run {run}), proven by Spark's reader"


def _fleet(defs, instance) -> list[str]:
    """The fleet report after the maintenance pass, executed by Dagster: what needs attention now."""
    from checkpoint.analysis import human_bytes

    job = defs.resolve_job_def("checkpoint_fleet")
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=quiet)
    meta = _metadata(result, "checkpoint_fleet_report")
    if not result.success or not meta:
        return ["  the fleet report failed; its run is in the instance"]
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    lines = [
        f"  {meta['checkpoints']} checkpoints, {meta['unhealthy_checkpoints']} with errors, longest replay "
        f"chain {meta['longest_chain']}, {human_bytes(meta['reclaimable_bytes'])} still reclaimable",
        *(f"  check {n}: {'passed' if c.passed else c.severity.value}" for n, c in sorted(checks.items())),
        f"  chart: {meta['chart']}",
        "  in the UI: Assets -> checkpoint_fleet_report (the table, the ranking, the checks)",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROJECT / "demo-output" / "checkpoints")
    parser.add_argument("--dagster-home", type=Path, default=PROJECT / "dagster_home")
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # the child that runs the queries
    # The suite's: the checkpoints copied from corpora that the same queries wrote (`_copy_generated`).
    parser.add_argument("--checkpoints-from", type=Path, nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate:
        from testbed.corpus import generate

        generate(args.generate, scenarios=_scenarios())
        return 0
    out = args.out.resolve()

    if out.exists():
        shutil.rmtree(out)
    started = time.monotonic()
    if args.checkpoints_from:
        _copy_generated(args.checkpoints_from, out)
        # Each scenario's newest file as old as a fresh one dated back, whatever its corpus' age
        # (the two corpora may be days apart).
        for scenario in out.iterdir():
            date_to(scenario, AGE_SECONDS)
        print(f"demo: checkpoints copied in {time.monotonic() - started:.0f} s", flush=True)
    else:
        count = len(DEMO_SCENARIOS) + len(DEFAULTS_SCENARIOS)
        print(f"demo: running {count} streaming queries into {out} ...", flush=True)
        if not _generate(out):
            return 1
        print(f"demo: checkpoints written in {time.monotonic() - started:.0f} s", flush=True)
        date_back(out, AGE_SECONDS)
    print(f"demo: files dated {AGE_SECONDS // 3600} h back, past the cleanup's grace period", flush=True)

    # Dagster reads DAGSTER_HOME when it is imported: set it first, to the project's instance.
    os.environ["DAGSTER_HOME"] = str(args.dagster_home.resolve())
    args.dagster_home.mkdir(exist_ok=True)
    # Dagster's notes to developers (beta parameters, the jobs' mixed backfill policies) are not
    # for the person reading the report.
    warnings.filterwarnings("ignore", module=r"dagster\..*")
    import dagster as dg

    from assets.partitions import CHECKPOINTS
    from assets.resources import CheckpointRoot, CheckpointRootsResource, SparkResource
    from orchestration.location import build_definitions

    root = CheckpointRoot(name="demo", url=str(out), apply_cleanup=True, queries_stopped=True)
    defs = build_definitions([root], spark=SparkResource(master="local[2]"))
    with dg.DagsterInstance.get() as instance:
        keys = sorted(CheckpointRootsResource(roots=[root]).discover("demo"))  # what discovery adds
        instance.add_dynamic_partitions(CHECKPOINTS, keys)
        print(f"demo: maintenance of {len(keys)} checkpoints through Dagster ...", flush=True)
        report = []
        results = {}
        for i, key in enumerate(keys, 1):
            t = time.monotonic()
            results[key] = _maintain(defs, instance, key)
            print(f"  [{i}/{len(keys)}] {key}: {time.monotonic() - t:.0f} s", flush=True)
            report += _report_line(key, results[key])
        key, line = _migrate(defs, instance, out, keys)
        migrated = key is not None
        if key is None:
            report.append(line)
        else:
            t = time.monotonic()
            results[key] = _maintain(defs, instance, key)  # maintainable at once, as any V2 checkpoint
            print(f"  {key}: {time.monotonic() - t:.0f} s", flush=True)
            first, *rest = _report_line(key, results[key])
            report += [first, line, *rest]
        print("demo: the fleet report over every checkpoint ...", flush=True)
        fleet = _fleet(defs, instance)
    print("\nMaintenance report\n" + "\n".join(report))
    print("\nFleet report\n" + "\n".join(fleet))
    print(
        f"\nThe runs are in the Dagster instance at {args.dagster_home}. Open the UI with:\n"
        f"  make ui      (DAGSTER_HOME={args.dagster_home.resolve()} .venv/bin/dagster dev -w workspace.yaml)"
    )
    return 0 if migrated and all(r["success"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
