"""Benchmark: what each read path costs on two checkpoints that differ only in older history.

Both checkpoints are synthetic with a real store's naming (testbed/synthetic.py): the same
stores, the same commit window and the same 5-changelog replay chains at the latest batch, but
`--small` against `--big` versions of state history. Each path runs on both, on local disk
(requests = storage calls) and on SeaweedFS through the counting proxy (requests = S3 requests),
best of `--repeat` for seconds. The same paths through a full listing (how they read before the
head-first model) run beside them as the baseline. Then one idle commit-sensor tick over a fleet of
`--fleet` checkpoints, run by Dagster's sensor machinery: on local disk checkpoints of about 50,000
files each (hard links to one template), on SeaweedFS their logs only.

    python -m bench.scale [--partitions 100] [--small 155] [--big 1505] [--s3-partitions 20]
                          [--s3-small 155] [--s3-big 305] [--fleet 200] [--fleet-partitions 10]
                          [--fleet-versions 755] [--repeat 3] [--skip local s3 fleet] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from checkpoint.analysis import validate
from checkpoint.compaction import CompactionPlanOptions, plan_compaction
from checkpoint.model import checkpoint_lineage, find_checkpoints, latest_commit, load_checkpoint, load_head
from checkpoint.storage import Storage
from testbed import synthetic
from testbed.copying import hadoop_checksum

WINDOW = 100


def _scan(root: Storage) -> None:
    for found in find_checkpoints(root):
        validate(found.load(root, strict=False))


def _new_commit_tick(s: Storage) -> None:
    latest_commit(s)
    plan_compaction(load_head(s, recent=2), CompactionPlanOptions(quiet_seconds=0))


# path -> (head-first, through a full listing); each takes the checkpoint's storage (scan: its parent)
PATHS: dict[str, tuple[Callable[[Storage], object], Callable[[Storage], object] | None]] = {
    "lineage": (
        lambda s: checkpoint_lineage(load_head(s)),
        lambda s: checkpoint_lineage(load_checkpoint(s)),
    ),
    "validate": (
        lambda s: validate(load_head(s, strict=False)),
        lambda s: validate(load_checkpoint(s, strict=False)),
    ),
    "scan (parent folder)": (_scan, None),
    "idle tick": (latest_commit, lambda s: load_checkpoint(s).latest_committed_batch),
    "tick, one new commit": (
        _new_commit_tick,
        lambda s: plan_compaction(load_checkpoint(s), CompactionPlanOptions(quiet_seconds=0)),
    ),
    "compaction plan": (
        lambda s: plan_compaction(load_head(s, recent=2)),
        lambda s: plan_compaction(load_checkpoint(s)),
    ),
}


def _measure(make: Callable[[], Storage], work, repeat: int, requests: Callable[[Storage], int]):
    best, count = float("inf"), 0
    for _ in range(repeat):
        storage = make()
        started = time.perf_counter()
        work(storage)
        best = min(best, time.perf_counter() - started)
        count = requests(storage)
    return best, count


def _table(rows: list[dict]) -> str:
    out = [
        "| where | path | requests small / big | ratio | seconds small / big | ratio | "
        "through a full listing: requests small / big, seconds small / big (ratio) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = r.get("baseline")
        base_cell = (
            ""
            if b is None
            else (
                f"{b['small_requests']:,} / {b['big_requests']:,}, {b['small_s']:.2f} / {b['big_s']:.2f} "
                f"({b['seconds_ratio']:.1f}x)"
            )
        )
        out.append(
            f"| {r['where']} | {r['path']} | {r['small_requests']:,} / {r['big_requests']:,} | "
            f"{r['requests_ratio']:.2f} | {r['small_s']:.3f} / {r['big_s']:.3f} | {r['seconds_ratio']:.2f} | "
            f"{base_cell} |"
        )
    return "\n".join(out)


def _compare(where: str, storages: dict[str, Callable[[], Storage]], requests, repeat: int) -> list[dict]:
    rows = []
    for path, (ours, before) in PATHS.items():
        row: dict = {"where": where, "path": path}
        for name, make in storages.items():
            target = partial(make, path.startswith("scan"))  # scan starts at the parent folder
            row[f"{name}_s"], row[f"{name}_requests"] = _measure(target, ours, repeat, requests)
        row["requests_ratio"] = row["big_requests"] / max(1, row["small_requests"])
        row["seconds_ratio"] = row["big_s"] / max(1e-9, row["small_s"])
        if before is not None:
            small = _measure(partial(storages["small"], False), before, 1, requests)
            big = _measure(partial(storages["big"], False), before, 1, requests)
            row["baseline"] = {"small_s": small[0], "big_s": big[0], "small_requests": small[1],
                               "big_requests": big[1]}  # fmt: skip
            row["baseline"]["seconds_ratio"] = big[0] / max(1e-9, small[0])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _local(args, work: Path) -> list[dict]:
    paths = {}
    for name, versions in (("small", args.small), ("big", args.big)):
        started = time.perf_counter()
        n = synthetic.build(work / name / "ckpt", args.partitions, versions, window=WINDOW)
        print(f"local {name}: {n:,} files, built in {time.perf_counter() - started:.0f} s", flush=True)
        paths[name] = work / name / "ckpt"
    storages = {n: (lambda parent, p=p: Storage(str(p.parent if parent else p))) for n, p in paths.items()}
    return _compare("local", storages, lambda s: s.calls.total(), args.repeat)


def _s3(args, work: Path) -> list[dict]:
    from testbed.s3server import s3_services

    with s3_services(work / "seaweedfs", "scale") as (server, proxy):
        fs = server.filesystem()
        for name, versions in (("small", args.s3_small), ("big", args.s3_big)):
            started = time.perf_counter()
            # As s3a writes a checkpoint: no Hadoop hidden checksums (`testbed.copying.hadoop_checksum`).
            made = synthetic.files(args.s3_partitions, versions, window=WINDOW)
            content = {rel: data for rel, data in made.items() if not hadoop_checksum(rel)}
            fs.pipe({f"scale/{name}/ckpt/{rel}": data for rel, data in content.items()})
            print(f"s3 {name}: {len(content):,} objects, uploaded in {time.perf_counter() - started:.0f} s")
        options = server.storage_options(proxy.endpoint)
        storages = {
            name: (lambda parent, n=name: Storage(f"s3://scale/{n}" + ("" if parent else "/ckpt"), options))
            for name in ("small", "big")
        }

        def requests(_storage: Storage) -> int:
            return sum(proxy.counts().values())

        def reset_then(make):
            def fresh(parent: bool) -> Storage:
                proxy.reset()
                return make(parent)

            return fresh

        return _compare("SeaweedFS", {n: reset_then(m) for n, m in storages.items()}, requests, args.repeat)


def _idle_tick(root: str, options: dict, count: int, latest: int) -> float:
    """Seconds of one idle tick of the real commit sensor over `count` checkpoints under `root`."""
    import dagster as dg

    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from orchestration.sensors import checkpoint_commit_sensor

    roots = CheckpointRootsResource(roots=[CheckpointRoot(name="fleet", url=root, storage_options=options)])
    keys = [f"fleet:q{i:04d}" for i in range(count)]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", keys)
        cursor = json.dumps(dict.fromkeys(keys, latest))  # every checkpoint at its latest commit
        ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
        started = time.perf_counter()
        result = checkpoint_commit_sensor(ctx)
        seconds = time.perf_counter() - started
    assert isinstance(result, dg.SkipReason), result  # idle: nothing new anywhere
    return seconds


def _link_tree(src: Path, dst: Path) -> None:
    """A checkpoint of its own whose files are hard links to the template's: every folder holds as
    many entries as a real one (what listings see), at the disk cost of one copy."""
    for folder, _, names in os.walk(src):
        target = dst / Path(folder).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            os.link(os.path.join(folder, name), target / name)


def _fleet(args, work: Path) -> list[dict]:
    """One idle commit-sensor tick over `--fleet` checkpoints, on local disk and on SeaweedFS."""
    one = synthetic.files(args.fleet_partitions, args.fleet_versions, window=WINDOW)
    latest = args.fleet_versions - 1
    started = time.perf_counter()
    template = work / "fleet-template"
    synthetic.write_local(template, one)
    for i in range(args.fleet):
        _link_tree(template, work / "fleet" / f"q{i:04d}")
    took = time.perf_counter() - started
    print(f"fleet: {args.fleet} checkpoints of {len(one):,} files, built in {took:.0f} s", flush=True)
    rows = [{"where": "local", "checkpoints": args.fleet, "files_each": len(one), "requests": None,
             "seconds": round(_idle_tick(str(work / "fleet"), {}, args.fleet, latest), 3)}]  # fmt: skip
    if "s3" in args.skip:
        return rows
    from testbed.s3server import s3_services

    # On S3 the checkpoints hold their logs only: uploading 200 x the state files would take most
    # of an hour here, and the tick never lists below commits/
    # (tests/checkpoint/test_history_on_s3.py proves it).
    kept = (r for r in one if not hadoop_checksum(r) and (not r.startswith("state/") or "/_metadata/" in r))
    logs = {rel: one[rel] for rel in kept}
    with s3_services(work / "seaweedfs-fleet", "fleet") as (server, proxy):
        fs = server.filesystem()
        started = time.perf_counter()
        fs.pipe({f"fleet/q{i:04d}/{rel}": data for i in range(args.fleet) for rel, data in logs.items()})
        print(
            f"fleet on S3: {args.fleet} x {len(logs)} objects in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        proxy.reset()
        seconds = _idle_tick("s3://fleet", server.storage_options(proxy.endpoint), args.fleet, latest)
        rows.append({"where": "SeaweedFS", "checkpoints": args.fleet, "files_each": len(logs),
                     "requests": dict(proxy.counts()), "seconds": round(seconds, 3)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--small", type=int, default=155)
    parser.add_argument("--big", type=int, default=1505)
    parser.add_argument("--s3-partitions", type=int, default=20)
    parser.add_argument("--s3-small", type=int, default=155)
    parser.add_argument("--s3-big", type=int, default=305)
    parser.add_argument("--fleet", type=int, default=200)
    # 10 partitions x 750 versions: about 50,000 files a checkpoint, 10M entries for 200 of them
    parser.add_argument("--fleet-partitions", type=int, default=10)
    parser.add_argument("--fleet-versions", type=int, default=755)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=["local", "s3", "fleet"])
    parser.add_argument("--dir", type=Path, help="where to build the checkpoints (default: a temp folder)")
    args = parser.parse_args()
    rows, fleet = [], []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        if "local" not in args.skip:
            rows += _local(args, work)
        if "s3" not in args.skip:
            rows += _s3(args, work)
        if "fleet" not in args.skip:
            fleet = _fleet(args, work)
    print(_table(rows))
    for f in fleet:
        print(f"fleet, {f['where']}: one idle commit-sensor tick over {f['checkpoints']} checkpoints of "
              f"{f['files_each']:,} files: {f['seconds']} s, requests {f['requests'] or 'n/a'}")  # fmt: skip


if __name__ == "__main__":
    main()
