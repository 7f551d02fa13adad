"""Project-level promises: the core stays plain Python, and Dagster loads the code location."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("checkpoint", "jobs", "assets", "orchestration", "cli", "testbed", "bench", "tests")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts (pyproject.toml) over the packages under `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(root / "pyproject.toml")], capture_output=True,
                          text=True, cwd=root, env=env, timeout=300)  # fmt: skip


def _planted(tmp_path: Path, plant: dict[str, str]) -> Path:
    """A copy of the project's packages with a line appended to some of its modules."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for rel, line in plant.items():
        with open(tmp_path / rel, "a") as f:
            f.write(f"\n{line}\n")
    return tmp_path


def test_the_import_contracts_hold() -> None:
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    # The layers, the CLI's two, compaction and migration apart, the core's tests apart from
    # Dagster and from Spark's jobs, and one face per core package.
    assert out.stdout.count("KEPT") == 7 + 14


def test_the_contracts_see_an_upward_import(tmp_path) -> None:
    root = _planted(tmp_path, {
        "checkpoint/format/layout.py": "from checkpoint.cleanup.plan import plan_gc",
        "jobs/compact.py": "def f():\n    import orchestration.jobs",
        "cli/gc.py": "import assets.cleanup",
        "bench/gc_plan.py": "from tests.support import damage",
        # Compaction and migration are siblings on checkpoint.rocksdb: layers alone would allow it.
        "checkpoint/migrate/state.py": "from checkpoint.compaction.rebuild import replay",
        # Past a package's face: layers and independence alone would allow both.
        "orchestration/due.py": "from checkpoint.model.head import load_head",
        "checkpoint/cleanup/plan.py": "from checkpoint.format.changelog import read_header",
        # The testbed and the benches go through the faces too.
        "testbed/demo.py": "from checkpoint.model.head import load_head",
        "bench/fork.py": "from checkpoint.cleanup.plan import plan_gc",
        # A core test reaching Dagster's adapters or the CLI, itself or through a helper.
        "tests/checkpoint/model/test_head.py": "from orchestration.due import SensorState",
        "tests/checkpoint/fork/test_fork.py": "from tests.support.assets import roots_over",
        "tests/checkpoint/rehearsal/test_verdict.py": "from tests.support.rehearsal import rehearsed",
        # A core test taking a Spark job itself, not as the `ports` fixture.
        "tests/checkpoint/compaction/test_compaction_flow.py": "from jobs.compact import StoreOutcome",
    })  # fmt: skip
    out = _lint_imports(root)
    assert out.returncode == 1
    for edge in ("checkpoint.format.layout -> checkpoint.cleanup.plan", "jobs.compact -> orchestration.jobs",
                 "cli.gc -> assets.cleanup", "bench.gc_plan -> tests.support",
                 "checkpoint.migrate.state -> checkpoint.compaction.rebuild",
                 "orchestration.due -> checkpoint.model.head",
                 "checkpoint.cleanup.plan -> checkpoint.format.changelog",
                 "testbed.demo -> checkpoint.model.head",
                 "bench.fork -> checkpoint.cleanup.plan",
                 "tests.checkpoint.model.test_head -> orchestration.due",
                 "tests.checkpoint.fork.test_fork -> tests.support.assets",
                 "tests.checkpoint.rehearsal.test_verdict -> tests.support.rehearsal",
                 "tests.checkpoint.compaction.test_compaction_flow -> jobs.compact"):  # fmt: skip
        assert edge in out.stdout, (edge, out.stdout[-3000:])


def test_the_face_contracts_are_the_generated_ones() -> None:
    """One per core package, generated from the packages there are (`tests/support/contracts.py`):
    a new package gets its face contract by running the generator, and this fails until it is."""
    from tests.support.contracts import core_packages, written

    text = (ROOT / "pyproject.toml").read_text()
    assert text == written(text), "run `python -m tests.support.contracts`"
    assert len(core_packages()) == 14


def test_no_module_imports_one_that_imports_it_back() -> None:
    from tests.support.imports import cycles

    assert cycles() == []


def test_a_planted_cycle_is_found(tmp_path) -> None:
    """The lease imported the audit trail, which imported the cleanup planner, which imported the
    trail back: a cycle the layers alone would not name inside one package. Planted here as the
    plan's kept form importing the trail that reads it."""
    root = _planted(tmp_path, {"checkpoint/safety/manifest.py": "from checkpoint.safety import trail"})
    code = "from tests.support.imports import cycles; print('\\n'.join(cycles()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)}, check=True)  # fmt: skip
    assert "checkpoint.safety.manifest -> checkpoint.safety.trail" in out.stdout.splitlines()


def test_formats_are_asked_not_compared() -> None:
    """Outside `checkpoint/format/`, code asks the checkpoint's state format what it needs to know,
    and a state file's kind what it is to a load (`tests/support/branches.py` counts six shapes).
    None remains: the fork asks the head's format whether it holds a batch's state
    (`holds_state_of`), as lineage asks whether it reads it (`reads_state_of`)."""
    from tests.support.branches import format_branches

    assert format_branches(ROOT) == []


def test_a_planted_format_branch_is_counted(tmp_path) -> None:
    from tests.support.branches import format_branches

    root = _planted(tmp_path, {
        "checkpoint/analysis/checks.py": "def f(c, a):\n    if why := c.states.refusal(a):\n        pass",
        "checkpoint/cleanup/decide.py": "f = lambda c: c.states.recovery.of(ByRecovery(listed=g, named=h))",
        "checkpoint/cleanup/plan.py": "def f(ckpt):\n    return ckpt.provider == Provider.HDFS",
        "checkpoint/cleanup/rules.py": "def f(c, b):\n    return c.states_at(b).version != c.states.version",
        "checkpoint/compaction/rebuild.py": "def f(c, u):\n    if not c.states.names_by(u):\n        pass",
        "checkpoint/expiry/purge.py": "def f(c, a):\n    return c.latest is None or c.states.refusal(a)",
        "checkpoint/fork/copy.py": "def f(c):\n    return c.states.recovery is LISTED",
        "checkpoint/migrate/flow.py": "R = ByEngine(hdfs=True, rocksdb=False)",
        "checkpoint/migrate/state.py": "def f(x):\n    return x.kind != FileKind.DELTA",
        "checkpoint/model/head.py": "def f(uid):\n    return uid is None",
        "checkpoint/rehearsal/scratch.py": "f = lambda h: h.states.by_engine(hdfs=g, rocksdb=k)",
        "checkpoint/repartition/guards.py": "def f(c):\n    return c.states.pinned",
        "checkpoint/retire/apply.py": "def f(e):\n    return e.kind in (FileKind.ZIP, FileKind.SNAPSHOT)",
        "checkpoint/retire/plan.py": "def f(c):\n    return isinstance(c.states.engine, Unread)",
        "orchestration/sensors.py": "def f(c, u):\n    assert c.states.names_by(u)",
        "cli/read.py": "def f(f):\n    return f.what.unique_id is not None",
        "jobs/compact.py": "def g(ckpt):\n    return ckpt.format_version or 2",
    })  # fmt: skip
    there = set(format_branches(ROOT))  # once: asked per branch, it parsed the project 17 times more
    planted = [b.split(":")[0] for b in format_branches(root) if b not in there]
    assert planted == ["checkpoint/analysis/checks.py", "checkpoint/cleanup/decide.py",
                       "checkpoint/cleanup/plan.py", "checkpoint/cleanup/rules.py",
                       "checkpoint/compaction/rebuild.py", "checkpoint/expiry/purge.py",
                       "checkpoint/fork/copy.py", "checkpoint/migrate/flow.py", "checkpoint/migrate/state.py",
                       "checkpoint/model/head.py",
                       "checkpoint/rehearsal/scratch.py", "checkpoint/repartition/guards.py",
                       "checkpoint/retire/apply.py", "checkpoint/retire/plan.py", "jobs/compact.py",
                       "orchestration/sensors.py",
                       "cli/read.py"], planted  # fmt: skip


def test_the_scheduling_order_names_test_files() -> None:
    from tests.conftest import _LONGEST_FIRST

    assert [n for n in _LONGEST_FIRST if not (ROOT / "tests" / f"{n}.py").exists()] == []


def test_every_test_folder_is_a_package() -> None:
    """A test folder without `__init__.py` is still collected, but the import contracts (which
    keep the core's tests off Dagster's adapters) do not see its modules."""
    folders = {p.parent for p in (ROOT / "tests").rglob("test_*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists()) == []


def test_the_wheel_ships_no_test_scaffolding() -> None:
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert {name.rstrip("*") for name in shipped["include"]} == {
        "checkpoint",
        "jobs",
        "assets",
        "orchestration",
        "cli",
    }


def test_no_shipped_file_is_over_600_lines() -> None:
    shipped = [p for package in PACKAGES[:5] for p in (ROOT / package).rglob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in shipped if (n := len(p.read_text().splitlines())) > 600}
    assert len(shipped) > 50 and long == {}


def test_core_imports_neither_dagster_nor_spark() -> None:
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for p in (ROOT / "checkpoint").rglob("*.py"))  # fmt: skip
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'pyspark', 'py4j'))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert len(modules) >= 8
    assert out.stdout.strip() == ""


def test_the_cli_loads_no_action_until_its_command_runs() -> None:
    """Every `ckpt` process pays its imports, and a read of a small checkpoint is mostly that: the
    CLI's module loads the core that every command reads with, and no action's package, numpy or
    crc32c until a command needs them (cli/main.py)."""
    actions = ("compaction", "cleanup", "expiry", "fork", "migrate", "repartition", "rehearsal", "retire")
    code = (
        "import sys, cli.main\n"
        + f"bad = sorted(m for m in sys.modules if m.split('.')[:2] in {[['checkpoint', a] for a in actions]}"
        + " or m.split('.')[0] in ('numpy', 'crc32c', 'pandas', 'pyspark', 'dagster', 'jobs'))\n"
        + "print(','.join(bad) + '|' + str('checkpoint.model' in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "|True"


def test_make_test_type_checks_the_shipped_packages(tmp_path) -> None:
    dry = subprocess.run(["make", "-n", "test"], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert ".venv/bin/mypy" in dry and dry.index("mypy") < dry.index("pytest")
    # The checker runs with the project's configuration and fails on a type error.
    bad = tmp_path / "bad.py"
    bad.write_text("def f(n: int) -> str:\n    return n\n")
    mypy = [str(Path(sys.executable).parent / "mypy"), "--config-file", str(ROOT / "pyproject.toml")]
    out = subprocess.run([*mypy, str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and "Incompatible return value type" in out.stdout


def test_dagster_definitions_validate() -> None:
    dagster = Path(sys.executable).parent / "dagster"
    env = {**os.environ, "DAGSTER_HOME": "", "CKPT_ROOTS": json.dumps([{"name": "demo", "url": str(ROOT)}])}
    env.pop("DAGSTER_HOME")
    out = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All code locations passed validation" in out.stdout + out.stderr


def test_the_demo_runs_the_queries_its_copies_come_from(tmp_path) -> None:
    """`make demo` runs the scenarios the suite's test copies from the corpora (`--checkpoints-from`),
    and a copy from corpora without one of them is refused by name, nothing copied."""
    from testbed import demo

    assert {s.name for s in demo._scenarios()} == {*demo.DEMO_SCENARIOS, *demo.DEFAULTS_SCENARIOS}
    corpus = tmp_path / "corpus"
    (corpus / "join").mkdir(parents=True)
    (corpus / "manifest.json").write_text(json.dumps({"scenarios": {"join": {}}}))
    with pytest.raises(SystemExit, match="no scenario long_chain, snapshots, killed, list_state"):
        demo._copy_generated([corpus], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_demo_runs_a_maintenance_pass_through_dagster(corpus_root, defaults_root, tmp_path) -> None:
    """`make demo`'s maintenance pass, on copies of the corpora its queries wrote (the same
    scenarios `testbed.demo` runs, generated once for the suite): the queries cost more than the
    pass, and the corpora prove them."""
    import dagster as dg

    from checkpoint.model.checkpoint import load_checkpoint

    home = tmp_path / "dagster_home"
    corpora = [str(corpus_root), str(defaults_root)]
    command = [sys.executable, "-m", "testbed.demo", "--out", str(tmp_path / "demo"),
               "--dagster-home", str(home), "--checkpoints-from", *corpora]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = out.stdout.split("Maintenance report", 1)[1]
    sections = {b.split()[0]: b for b in report.split("\n  demo:")[1:]}
    assert set(sections) == {
        "join/checkpoint", "killed/checkpoint_after_restart", "killed/checkpoint_before_restart",
        "list_state/checkpoint", "long_chain/checkpoint", "snapshots/checkpoint", "two_actions/checkpoint",
        "hdfs_agg/checkpoint", "migrated/hdfs_agg",
    }  # fmt: skip
    # Spark's defaults too: the HDFS-backed checkpoint maintained, migrated to RocksDB V2, and its
    # copy maintained at once.
    assert "migrated from demo:hdfs_agg/checkpoint to RocksDB format V2" in sections["migrated/hdfs_agg"]
    assert "(ok, run" in sections["migrated/hdfs_agg"] and "(ok, run" in sections["hdfs_agg/checkpoint"]
    migrated = load_checkpoint(str(tmp_path / "demo" / "migrated" / "hdfs_agg"))
    assert load_checkpoint(str(tmp_path / "demo" / "hdfs_agg" / "checkpoint")).state_format == "hdfs V1"
    assert migrated.state_format == "rocksdb V2"
    assert "4 stores compacted, longest replay chain 32 -> 0" in sections["long_chain/checkpoint"]
    assert "LONG_REPLAY_CHAIN" in sections["long_chain/checkpoint"]
    assert "reclaimed: 16 files" in sections["killed/checkpoint_after_restart"]  # lost attempts
    assert re.search(r"reclaimed: [1-9]\d* files", sections["two_actions/checkpoint"])  # superseded files
    assert "dagster dev -w workspace.yaml" in out.stdout
    # It ends with the fleet report over the nine, after the maintenance pass.
    fleet = out.stdout.split("Fleet report", 1)[1]
    assert re.search(r"9 checkpoints, \d+ with errors, longest replay chain \d+", fleet), fleet
    assert "check fleet_no_errors:" in fleet and "checkpoint_fleet_report" in fleet
    assert Path(re.search(r"chart: (\S+)", fleet).group(1)).read_text().startswith("<svg")
    # The runs were Dagster's, recorded in the instance the UI opens.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        jobs = sorted(r.job_name for r in runs)
        assert jobs == ["checkpoint_fleet"] + ["checkpoint_maintenance"] * 9 + ["migrate_checkpoint"]
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    chain = tmp_path / "demo" / "long_chain" / "checkpoint"
    newest = load_checkpoint(str(chain)).latest_committed_batch + 1  # the committed version
    assert len(list(chain.rglob(f"{newest}_*.zip"))) == 4


def test_spark_resource_builds_a_working_local_session(spark) -> None:
    from assets.resources import SparkResource

    session = SparkResource(master="local[2]").session()
    assert session.range(5).count() == 5
    assert session.conf.get("spark.sql.streaming.stateStore.checkpointFormatVersion") == "2"


def test_rocksdict_is_pinned_to_rocksdb_9_8_4() -> None:
    """docs/compaction.md (rebuild note 0): RocksDB must not be newer than the rocksdbjni of the
    oldest Spark that reads the zips (Spark 4.0-4.3 ship 9.8.4, which rocksdict 0.3.29 bundles).
    Moving the pin needs that check again."""
    from importlib.metadata import version

    assert version("rocksdict") == "0.3.29"
    jars = Path(__import__("pyspark").__file__).parent / "jars"
    assert [j.name for j in jars.glob("rocksdbjni-*.jar")] == ["rocksdbjni-9.8.4.jar"]


def test_the_names_users_instances_hold_are_unchanged() -> None:
    """Runs, schedules, sensors, backfills and run keys in users' Dagster instances refer to these
    names (taken from the definitions before the packages were reordered; issue 24 added the state
    profile asset and the repartition job; issue 40 the migration job; issue 60 the batched
    maintenance job; issue 62 the retirement job)."""
    from assets.resources import CheckpointRoot
    from orchestration.location import build_definitions

    defs = build_definitions([CheckpointRoot(name="prod", url="/x"), CheckpointRoot(name="team-b", url="/y")])
    repo = defs.get_repository_def()
    assert sorted(k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()) == [
        "checkpoint_compaction", "checkpoint_expired_state", "checkpoint_fleet_report",
        "checkpoint_inventory", "checkpoint_lineage_report", "checkpoint_orphan_cleanup",
        "checkpoint_orphan_plan", "checkpoint_state_profile",
    ]  # fmt: skip
    assert sorted(c.name for c in repo.asset_graph.asset_check_keys) == [
        "commit_log_consistency", "expired_share", "fleet_lineage_headroom", "fleet_no_errors",
        "lineage_completeness", "plan_matches_commit_log", "snapshot_integrity",
    ]  # fmt: skip
    assert sorted(j.name for j in repo.get_all_jobs() if not j.name.startswith("__")) == [
        "checkpoint_audit", "checkpoint_cleanup", "checkpoint_fleet", "checkpoint_maintenance",
        "compact_checkpoints", "fork_checkpoint", "maintain_checkpoints", "migrate_checkpoint",
        "purge_expired_state", "repartition_checkpoint", "retire_checkpoints", "validate_checkpoints",
    ]  # fmt: skip
    assert sorted(s.name for s in repo.schedule_defs) == [
        "checkpoint_audit_schedule", "checkpoint_fleet_schedule", "maintenance_prod", "maintenance_team_b",
    ]  # fmt: skip
    assert sorted(s.name for s in repo.sensor_defs) == [
        "checkpoint_commit_sensor",
        "checkpoint_discovery_sensor",
    ]
    assert sorted(defs.resources or {}) == ["roots", "spark"]


def test_no_face_exports_an_action_that_skips_its_door() -> None:
    """An action's door takes its leases and hands the action their `check`. A function that takes
    the caller's `check` instead is a lease-less twin: none is importable from a core package's
    face. One action run inside another goes through its own door on the outer leases
    (`safety.held_by`, the one function that takes a `check`: it makes a door's lease-taking)."""
    import importlib
    import inspect
    import pkgutil

    import checkpoint

    twins = []
    for package in (m.name for m in pkgutil.iter_modules(checkpoint.__path__) if m.ispkg):
        face = importlib.import_module(f"checkpoint.{package}")
        for name in face.__all__:
            obj = getattr(face, name)
            if inspect.isfunction(obj) and "check" in inspect.signature(obj).parameters:
                twins.append(f"checkpoint.{package}.{name}")
    assert twins == ["checkpoint.safety.held_by"]
    for package, name in (("fork", "fork"), ("migrate", "migrate"), ("cleanup", "apply_plan"),
                          ("fork", "apply_fork")):  # fmt: skip
        assert not hasattr(importlib.import_module(f"checkpoint.{package}"), name), (package, name)


def test_nothing_above_storage_reads_a_backends_flags() -> None:
    """Storage answers questions that act (`Storage.width`, `sidecars`, `appended`); the flags
    they are answered from stay inside `checkpoint/storage/`, as a format's kind stays in its type."""
    flag = re.compile(r"\bbackend\.(latency_bound|appends|hidden_checksums)\b")
    shipped = ("checkpoint", "jobs", "assets", "orchestration", "cli")
    readers = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in shipped
        for path in sorted((ROOT / top).rglob("*.py"))
        if "storage" not in path.relative_to(ROOT).parts[:2]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if flag.search(line)
    ]
    assert readers == []


def test_a_partition_key_is_parsed_in_one_place() -> None:
    """A partition key becomes a checkpoint at `CheckpointRootsResource.site` alone, so every
    adapter reaches the same root, path, storage options and trail for it. Others only ask a key's
    root (`root_of`), to sort keys by it."""
    parse = re.compile(r"\bparse_partition_key\b")
    readers = sorted(
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("assets", "orchestration", "cli", "jobs", "testbed", "bench")
        for path in (ROOT / top).rglob("*.py")
        if path.relative_to(ROOT).as_posix() != "assets/partitions.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if parse.search(line) and "import" not in line
    )
    assert [r.split(":")[0] for r in readers] == ["assets/resources.py"], readers


def test_no_core_function_defaults_a_lease_check_to_nothing() -> None:
    """A `check` is the leases' own, handed down by a door. A default that checks nothing lets a
    caller forget it and write under no lease: every core function that takes one is given it."""
    import importlib
    import inspect
    import pkgutil

    import checkpoint

    defaulted = []
    for info in pkgutil.walk_packages(checkpoint.__path__, "checkpoint."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if not inspect.isfunction(obj) or obj.__module__ != info.name:
                continue
            check = inspect.signature(obj).parameters.get("check")
            if check is not None and check.default is not inspect.Parameter.empty:
                defaulted.append(f"{info.name}.{name}")
    assert defaulted == []


def _two_part(obj, firsts: set[str]) -> bool | None:
    """None when `obj` takes none of `firsts` first; else whether it is `f(first, options)` with
    the options one frozen dataclass. Annotations as written (`from __future__ import
    annotations`): names, not types."""
    import dataclasses
    import inspect

    params, notes = list(inspect.signature(obj).parameters), obj.__annotations__
    if not params or not firsts & set(str(notes.get(params[0], "")).split(" | ")):
        return None
    options = obj.__globals__.get(str(notes.get(params[1], "")).split("[")[0]) if len(params) == 2 else None
    return dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen  # type: ignore[union-attr]


def _exported() -> list[tuple[str, object]]:
    """(`checkpoint.<package>.<name>`, the function) for every function a core face exports."""
    import importlib
    import inspect
    import pkgutil

    import checkpoint

    packages = [m.name for m in pkgutil.iter_modules(checkpoint.__path__) if m.ispkg]
    faces = [importlib.import_module(f"checkpoint.{package}") for package in packages]
    return [(f"{face.__name__}.{name}", obj) for face in faces for name in face.__all__
            if inspect.isfunction(obj := getattr(face, name))]  # fmt: skip


def test_every_door_has_one_shape() -> None:
    """An action's door is `action(request, options) -> result`: the request is one of the doors'
    kinds (`InPlace`, `TwoSided`, `EachInPlace`), the options one frozen dataclass of the action's
    own. Found, not listed: every function a core face exports that takes a request first (its
    plans, which take the request they are applied through, are the next test's)."""
    import inspect

    doors, wrong = [], []
    for where, obj in _exported():
        shaped = _two_part(obj, {"InPlace", "TwoSided", "EachInPlace"})
        if shaped is None or where.rsplit(".", 1)[1].startswith("plan_"):
            continue
        doors.append(where.rsplit(".", 1)[1])
        if not shaped:
            wrong.append(f"{where}{inspect.signature(obj)}")
    assert wrong == []
    assert sorted(doors) == ["apply_cleanup", "apply_retirement", "compact_checkpoints", "fork_checkpoint",
                             "migrate_checkpoint", "purge_expired", "rehearse", "repartition_checkpoint",
                             "undo_repartition", "write_fork_plan"]  # fmt: skip


def test_the_plan_side_has_one_shape() -> None:
    """What an action plans, checks or reports before it changes anything is `plan(what, options)
    -> plan`: `what` the request its apply goes through (a plan written to the trail), the place
    (a report that writes nothing) or the checkpoint already read (an analysis), the options one
    frozen dataclass. Found: every `plan_*` a core face exports; and the analyses and preflights
    that share it."""
    import inspect

    from checkpoint.analysis import validate
    from checkpoint.expiry import expired_report
    from checkpoint.migrate.flow import preflight as migration_preflight
    from checkpoint.repartition import preflight as repartition_preflight

    found = [(w, obj) for w, obj in _exported() if w.rsplit(".", 1)[1].startswith("plan_")]
    assert sorted(w.rsplit(".", 1)[1] for w, _ in found) == [
        "plan_cleanup", "plan_compaction", "plan_fork", "plan_gc", "plan_retirement"
    ]  # fmt: skip
    plans = [*(obj for _, obj in found), validate, expired_report, migration_preflight, repartition_preflight]
    firsts = {"InPlace", "TwoSided", "Storage", "Checkpoint", "ForkSource"}
    wrong = [f"{obj.__module__}.{obj.__name__}{inspect.signature(obj)}" for obj in plans
             if not _two_part(obj, firsts)]  # fmt: skip
    assert wrong == []


def _import_time_environment_reads(source: str) -> list[int]:
    """The lines of a module that read the environment as it is imported: outside any function."""
    import ast

    found: list[int] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return  # read when called; defaults and decorators run at import, but name no environment here
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "getenvb"):
            found.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id in ("environ", "getenv"):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def test_no_product_module_reads_the_environment_when_imported() -> None:
    """A setting read once at import would be the first caller's for the life of the process (and
    the suite's commands run forked from a process that imported the CLI: `tests/support/cli.py`).
    Dagster's definitions are left out: a code location reads its deployment's settings as it
    loads (`orchestration/sensors.py`), once for its process, by design."""
    shipped = ("checkpoint", "jobs", "cli")
    reads = [
        f"{path.relative_to(ROOT)}:{line}"
        for top in shipped
        for path in sorted((ROOT / top).rglob("*.py"))
        for line in _import_time_environment_reads(path.read_text())
    ]
    assert reads == []
    planted = "import os\nLEVEL = os.environ.get('X')\nclass A:\n    b = os.getenv('Y')\n"
    planted += "def f():\n    return os.environ\n"
    assert _import_time_environment_reads(planted) == [2, 4]
