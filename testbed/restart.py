"""Restarting a corpus query on a changed checkpoint and on an untouched copy, and what to compare:
the rows it emits and its state as a user reads it (Spark's state data source). Shared by the
tests, `bench/repartition.py` and the checks under other Spark versions, which run this module in a
child process of that version (`testbed.generations.restart_under`):

    python -m testbed.restart RUNS.json OUT.json

RUNS.json lists the restarts, each `{"scenario", "scenario_dir", "checkpoint", "extra"}`; they run
in order in one session, and OUT.json lists what each emitted and the state it ended with.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

# How the state data source reads each store of a scenario as a user sees it (default: one reader,
# no options).
USER_READERS: dict[str, list[dict[str, str]]] = {
    "dedup_agg": [{"operatorId": "0"}, {"operatorId": "1"}],
    "hdfs_dedup": [{"operatorId": "0"}, {"operatorId": "1"}],
    "rocksdb_v1_dedup": [{"operatorId": "0"}, {"operatorId": "1"}],
    "join": [{"joinSide": "left"}, {"joinSide": "right"}],
    "hdfs_join": [{"joinSide": "left"}, {"joinSide": "right"}],
    "rocksdb_v1_join": [{"joinSide": "left"}, {"joinSide": "right"}],
    "join_cf": [{"joinSide": "left"}, {"joinSide": "right"}],
    "join_cf_v1": [{"joinSide": "left"}, {"joinSide": "right"}],
    "list_state": [{"stateVarName": "items"}],
    "every_state": [{"stateVarName": v} for v in ("count", "items", "last")],
    "expiring": [{"stateVarName": v} for v in ("count", "items", "last")],
    "timers": [{"stateVarName": "seen"}, {"readRegisteredTimers": "true"}],
}
for _name in ("list_state", "every_state", "timers"):  # the same queries on RocksDB format V1
    USER_READERS[f"rocksdb_v1_{_name}"] = USER_READERS[_name]
USER_READERS["expiring_v1"] = USER_READERS["expiring"]
USER_READERS["stopped_midbatch"] = [*USER_READERS["expiring"], {"readRegisteredTimers": "true"}]
USER_READERS["stopped_midbatch_v1"] = USER_READERS["stopped_midbatch"]


def plain(value: Any) -> Any:
    """A row as nested plain values, without what differs between two equal states: the partition
    a row sits in, and TTL expirations (processing time plus the TTL)."""
    if hasattr(value, "asDict"):
        value = value.asDict()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k not in ("partition_id", "ttlExpirationMs")}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def latest_batch(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def state_rows(spark, checkpoint: Path | str, name: str) -> list[str]:
    """Every store's rows at the latest committed batch, as a user reads them, sorted. A URL (an
    object store's checkpoint) is read at the batch Spark's reader takes by default, its latest."""
    rows: list[str] = []
    for options in USER_READERS.get(name, [{}]):
        load = spark.read.format("statestore")
        if isinstance(checkpoint, Path):
            load = load.option("batchId", latest_batch(checkpoint))
        for key, value in options.items():
            load = load.option(key, value)
        rows += [f"{options}:{plain(r)!r}" for r in load.load(str(checkpoint)).collect()]
    return sorted(rows)


def restart(
    spark, name: str, scenario_dir: Path, checkpoint: Path | str, extra: Path, read_state: bool = True
) -> dict[str, Any]:
    """The real query again with one more input file (the same for every copy given the same
    `extra`); what it emitted and, unless not `read_state`, the state it ended with (Spark 4.0's
    state data source cannot read a format V2 checkpoint: it ignores the unique ids, and looks for
    `<v>.changelog`)."""
    from jobs.spark_session import scoped_confs
    from testbed.queries import write_inputs

    scenario = scenario_named(name)
    emitted: list[str] = []

    def sink(df, batch_id: int) -> None:
        emitted.extend(repr(plain(r)) for r in df.collect())

    for sub, rows_for in scenario.inputs.items():
        write_inputs(extra / sub if sub else extra, 1, rows_for, start=scenario.batches)
    scenario.run(spark, scenario_dir, checkpoint, max_files=100_000, sink=sink, extra=extra)
    if not read_state:
        return {"emitted": sorted(emitted)}
    with scoped_confs(spark, scenario.confs):  # a format V1 checkpoint is read in a V1 session
        return {"emitted": sorted(emitted), "state": state_rows(spark, checkpoint, name)}


# What a restart of an untouched copy gave, kept in the cache under a digest of what it read: the
# copy's bytes, where the corpus lies and its inputs, the code that restarts and reads it (here and
# in the test support), Spark's version and the session's SQL confs. Left out, as a stale entry
# there can only fail a test, never pass one (the control runs no product code): pandas' and the
# JVM's versions. Each untouched corpus checkpoint was restarted again by every test that
# changed a copy of it; now once, until any of those change. Never for transformWithState, whose
# processing-time TTLs and timers make the state depend on when the restart ran.
_RESTART_CODE = tuple(f"testbed/{f}.py" for f in ("queries", "scenarios", "operators", "defaults", "corpus",
                                                   "generators", "sinks", "restart")) + (
    "tests/support/state.py", "tests/support/defaults.py", "jobs/spark_session.py")  # fmt: skip
_VOLATILE_CONFS = ("spark.sql.warehouse.dir",)  # where the session started, not what it computes


def untouched(spark, shape: str, name: str, scenario_dir: Path, checkpoint: Path, extra: dict[str, Any],
              restart_it: Callable[[], dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """What `restart_it()` gives for the untouched copy `checkpoint` of scenario `name`: cached
    (`shape` names what it returns, `extra` how it restarts), or run and then cached. A restart
    that raises caches nothing."""
    if not _keepable(name):  # before the session's confs are read for a key it cannot have
        return restart_it()
    confs = sorted((r.key, r.value) for r in spark.sql("SET").collect()
                   if r.key.startswith("spark.sql.") and r.key not in _VOLATILE_CONFS)  # fmt: skip
    key = untouched_key([shape, spark.version, confs, extra], name, scenario_dir, checkpoint)
    assert key is not None  # a keepable scenario always has one
    result = kept_restart(key)
    if result is None:
        result = restart_it()
        keep_restart(key, result)
    return result


def untouched_key(how: list[Any], name: str, scenario_dir: Path, checkpoint: Path) -> str | None:
    """The cache's key for restarting the untouched copy `checkpoint` of scenario `name` as `how`
    says (the engine, its version and confs, what the restart returns); None where a restart
    cannot be kept (transformWithState's processing-time TTLs and timers)."""
    if not _keepable(name):
        return None
    digest = hashlib.sha256()
    # Where the corpus lies too: its logs name their inputs by absolute path.
    where = str(scenario_dir.resolve())
    digest.update(json.dumps([*how, name, where], sort_keys=True).encode())
    here = Path(__file__).parent.parent
    read = (("code", here, [here / f for f in _RESTART_CODE]),
            ("checkpoint", checkpoint, sorted(checkpoint.rglob("*"))),
            ("input", scenario_dir, sorted((scenario_dir / "input").rglob("*"))))  # fmt: skip
    # A copy's operator metadata v2 names its schema files where the copy lies
    # (`testbed.copying.naming_itself`): without its place, two copies of one checkpoint are one key.
    own = _spark_url(checkpoint).encode()
    for label, folder, files in read:
        for f in files:
            if f.is_file():
                data = f.read_bytes()
                if label == "checkpoint":
                    data = data.replace(own, b"<the copy>")
                digest.update(f"{label}:{f.relative_to(folder)}:{len(data)}\n".encode())
                digest.update(data)
    return digest.hexdigest()


def _spark_url(checkpoint: Path) -> str:
    from checkpoint.storage import Storage

    return Storage(str(checkpoint)).spark_url


def _keepable(name: str) -> bool:
    return not any("stateVarName" in o or "readRegisteredTimers" in o for o in USER_READERS.get(name, []))


def _kept(key: str) -> Path:
    from testbed.cache import cache_home

    return cache_home() / "restarts" / f"{key}.json"


def kept_restart(key: str) -> dict[str, Any] | None:
    """A restart kept under `key`, or None."""
    kept = _kept(key)
    return json.loads(kept.read_text()) if kept.exists() else None


def keep_restart(key: str, result: dict[str, Any]) -> None:
    kept = _kept(key)
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f".{kept.name}.{os.getpid()}")
    partial.write_text(json.dumps(result))
    partial.replace(kept)


def scenario_named(name: str):
    """The scenario of any corpus: the main one, the operators', Spark's defaults."""
    from testbed import defaults, operators

    try:
        return operators.scenario_named(name)
    except KeyError:
        return defaults.scenario_named(name)


def differences(changed: dict[str, Any], untouched: dict[str, Any]) -> list[str]:
    """What differs between two restarts; empty when they are equal and not trivially so (the
    state only where both read it)."""
    out = []
    for what in ("emitted", *(["state"] if "state" in changed or "state" in untouched else [])):
        if not untouched[what]:
            out.append(f"the untouched copy has no {what} rows: nothing to compare")
        elif changed[what] != untouched[what]:
            out.append(f"{what}: {len(changed[what])} rows against {len(untouched[what])}, first differing: "
                       f"{sorted(set(changed[what]) ^ set(untouched[what]))[:1]}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    from jobs.spark_session import local_session

    spark = local_session(app_name="ckpt-restart")
    results = []
    try:
        for run in json.loads(args.runs.read_text()):
            where = (Path(run[k]) for k in ("scenario_dir", "checkpoint", "extra"))
            result = restart(spark, run["scenario"], *where, read_state=run.get("read_state", True))
            results.append({**result, "spark_version": spark.version})
    finally:
        spark.stop()
    args.out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
