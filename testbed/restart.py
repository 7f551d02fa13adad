"""Restarting a corpus query on a changed checkpoint and on an untouched copy, and what to compare:
the rows it emits and its state as a user reads it (Spark's state data source). Shared by the
tests, `bench/repartition.py` and the check under other Spark versions, which runs this module in a
child process of that version:

    python -m testbed.restart SCENARIO SCENARIO_DIR CHECKPOINT EXTRA_INPUT OUT.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# How the state data source reads each store of a scenario as a user sees it (default: one reader,
# no options).
USER_READERS: dict[str, list[dict[str, str]]] = {
    "dedup_agg": [{"operatorId": "0"}, {"operatorId": "1"}],
    "join": [{"joinSide": "left"}, {"joinSide": "right"}],
    "join_cf": [{"joinSide": "left"}, {"joinSide": "right"}],
    "list_state": [{"stateVarName": "items"}],
    "every_state": [{"stateVarName": v} for v in ("count", "items", "last")],
    "timers": [{"stateVarName": "seen"}, {"readRegisteredTimers": "true"}],
}


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


def restart(spark, name: str, scenario_dir: Path, checkpoint: Path | str, extra: Path) -> dict[str, Any]:
    """The real query again with one more input file (the same for every copy given the same
    `extra`); what it emitted and the state it ended with."""
    from testbed.corpus import write_inputs
    from testbed.operators import scenario_named

    scenario = scenario_named(name)
    emitted: list[str] = []

    def sink(df, batch_id: int) -> None:
        emitted.extend(repr(plain(r)) for r in df.collect())

    for sub, rows_for in scenario.inputs.items():
        write_inputs(extra / sub if sub else extra, 1, rows_for, start=scenario.batches)
    scenario.run(spark, scenario_dir, checkpoint, max_files=100_000, sink=sink, extra=extra)
    return {"emitted": sorted(emitted), "state": state_rows(spark, checkpoint, name)}


def differences(changed: dict[str, Any], untouched: dict[str, Any]) -> list[str]:
    """What differs between two restarts; empty when they are equal and not trivially so."""
    out = []
    for what in ("emitted", "state"):
        if not untouched[what]:
            out.append(f"the untouched copy has no {what} rows: nothing to compare")
        elif changed[what] != untouched[what]:
            out.append(f"{what}: {len(changed[what])} rows against {len(untouched[what])}, first differing: "
                       f"{sorted(set(changed[what]) ^ set(untouched[what]))[:1]}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("scenario_dir", type=Path)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("extra", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    from jobs.spark_session import local_session

    spark = local_session(app_name="ckpt-restart")
    try:
        result = restart(spark, args.scenario, args.scenario_dir, args.checkpoint, args.extra)
        result["spark_version"] = spark.version
    finally:
        spark.stop()
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
