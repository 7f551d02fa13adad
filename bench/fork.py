"""Benchmark: a fork copies what recovery at a batch reads, and costs what that set costs.

Each part forks a checkpoint with long history and compares, in the same process:
- files and bytes copied against the oracle of what recovery at the batch reads, computed from a
  full listing (testbed/recovery.py): the target ratio is 1.00;
- seconds against a plain recursive copy of the whole checkpoint (shutil.copytree locally, s3fs's
  recursive copy on S3, server-side like the fork's); best of `--repeat`;
- peak RSS (VmHWM) of a fresh process running the fork against one running the plain copy.

  (a) real: an aggregation run by PySpark for `--batches` batches (4 partitions, Spark's defaults:
      a snapshot every 10 deltas, 100 batches retained), forked at its latest batch and 50 back;
  (b) synthetic, with a real store's naming (testbed/synthetic.py): `--partitions` stores with
      `--versions` versions of history, on local disk;
  (c) the same shape (`--s3-partitions`, `--s3-versions`) on SeaweedFS through the counting proxy:
      S3 to S3, where both copy server-side; requests counted by the proxy.

    python -m bench.fork [--batches 150] [--partitions 50] [--versions 1505] [--s3-partitions 10]
                         [--s3-versions 305] [--repeat 3] [--skip real synthetic s3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from checkpoint.fork import ForkOptions, ForkResult, fork_checkpoint
from checkpoint.model import load_checkpoint
from checkpoint.safety import TwoSided, taken_at_once
from checkpoint.storage import Storage
from testbed import synthetic
from testbed.copying import hadoop_checksum
from testbed.recovery import recovery_files

_PEAK = """
import json, shutil, sys
mode, src, dest = sys.argv[1:4]
if mode == "fork":
    from checkpoint.fork import fork_checkpoint
    from checkpoint.safety import TwoSided, taken_at_once
    from checkpoint.storage import Storage
    fork_checkpoint(TwoSided(Storage(src), Storage(dest), taken_at_once("bench")))
else:
    shutil.copytree(src, dest)
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({"peak_kib": int(status["VmHWM"].split()[0])}))
"""


def _peak_rss_mib(mode: str, src: Path, dest: Path) -> float:
    out = subprocess.run([sys.executable, "-c", _PEAK, mode, str(src), str(dest)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)["peak_kib"] / 1024


def _best(run: Callable[[int], None], repeat: int) -> float:
    times = []
    for i in range(repeat):
        started = time.perf_counter()
        run(i)
        times.append(time.perf_counter() - started)
    return min(times)


def _tree(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _row(label: str, source: tuple[int, int], result, oracle: dict[str, int], fork_s: float, copy_s: float):
    return {
        "checkpoint": label, "batch": result.batch, "source_files": source[0], "source_bytes": source[1],
        "fork_files": result.files, "recovery_files": len(oracle),
        "files_ratio": round(result.files / len(oracle), 3),
        "fork_bytes": result.total_bytes, "recovery_bytes": sum(oracle.values()),
        "bytes_ratio": round(result.total_bytes / sum(oracle.values()), 3),
        "fork_s": round(fork_s, 3), "copy_s": round(copy_s, 3), "seconds_ratio": round(fork_s / copy_s, 3),
        "requests": result.requests, "server_side_files": result.server_side_files,
    }  # fmt: skip


def fork(src: Storage, dest: Storage, batch: int | None = None) -> ForkResult:
    """The fork through its door, as the CLI runs it: both leases taken at once, then the copy."""
    return fork_checkpoint(TwoSided(src, dest, taken_at_once("bench")), ForkOptions(batch=batch))


def _local_row(label: str, src: Path, batch: int | None, work: Path, repeat: int, peak: bool) -> dict:
    """One fork of a local checkpoint against the oracle and against copytree of the whole."""
    ckpt = load_checkpoint(str(src))
    batch = ckpt.latest_committed_batch if batch is None else batch
    oracle = recovery_files(src, batch)
    dests = [work / f"{label}-fork-{i}" for i in range(repeat)]
    results = []
    fork_s = _best(lambda i: results.append(fork(Storage(str(src)), Storage(str(dests[i])), batch)), repeat)
    copy_s = _best(lambda i: shutil.copytree(src, work / f"{label}-copy-{i}"), repeat)
    row = _row("local " + label, _tree(src), results[0], oracle, fork_s, copy_s)
    if peak and batch == ckpt.latest_committed_batch:
        fork_mib = _peak_rss_mib("fork", src, work / f"{label}-peak-fork")
        copy_mib = _peak_rss_mib("copy", src, work / f"{label}-peak-copy")
        row.update(fork_peak_mib=round(fork_mib), copy_peak_mib=round(copy_mib))
    for path in [*dests, *(work / f"{label}-copy-{i}" for i in range(repeat))]:
        shutil.rmtree(path, ignore_errors=True)
    return row


def _real(args, work: Path) -> list[dict]:
    from jobs.spark_session import local_session
    from testbed.queries import aggregation
    from testbed.scenarios import Scenario

    spark = local_session(master="local[2]", app_name="bench-fork")
    scenario = Scenario("history", "aggregation with Spark's defaults", aggregation, args.batches, {})
    started = time.perf_counter()
    scenario.build(spark, work / "real")
    spark.stop()
    src = work / "real" / "checkpoint"
    print(
        f"real: {args.batches} batches written by PySpark in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    latest = load_checkpoint(str(src)).latest_committed_batch
    return [_local_row("real", src, b, work, args.repeat, True) for b in (latest, latest - 50)]


def _synthetic(args, work: Path) -> list[dict]:
    src = work / "synthetic"
    n = synthetic.build(src, args.partitions, args.versions)
    print(f"synthetic: {n:,} files", flush=True)
    return [_local_row("synthetic", src, None, work, args.repeat, True)]


def _s3(args, work: Path) -> list[dict]:
    from testbed.s3server import s3_services

    with s3_services(work / "seaweedfs", "bench") as (server, proxy):
        fs = server.filesystem()
        # As s3a writes a checkpoint: no Hadoop hidden checksums (`testbed.copying.hadoop_checksum`).
        made = synthetic.files(args.s3_partitions, args.s3_versions)
        content = {rel: data for rel, data in made.items() if not hadoop_checksum(rel)}
        fs.pipe({f"bench/src/{rel}": data for rel, data in content.items()})
        print(f"s3: {len(content):,} objects uploaded", flush=True)
        options = server.storage_options(proxy.endpoint)
        via_proxy = server.filesystem().__class__(**options, skip_instance_cache=True)
        local = work / "s3-oracle"
        fs.get("bench/src/", str(local), recursive=True)
        oracle = recovery_files(local, load_checkpoint(str(local)).latest_committed_batch)
        counts: dict[str, dict] = {}
        results = []

        def run_fork(i: int) -> None:
            results.append(fork(Storage("s3://bench/src", options), Storage(f"s3://bench/fork-{i}", options)))

        def run_copy(i: int) -> None:
            proxy.reset()
            via_proxy.copy("bench/src", f"bench/copy-{i}", recursive=True)
            counts["copy"] = dict(proxy.counts())

        fork_s, copy_s = _best(run_fork, args.repeat), _best(run_copy, args.repeat)
        row = _row("s3 synthetic", (len(content), sum(len(d) for d in content.values())), results[0], oracle,
                   fork_s, copy_s)  # fmt: skip
        return [{**row, "copy_requests": sum(counts["copy"].values())}]


def _table(rows: list[dict]) -> str:
    head = ("| checkpoint | batch | files in SRC | fork files / recovery | bytes / recovery | fork s | "
            "plain copy s | seconds ratio | peak RSS fork / copy |")  # fmt: skip
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        peak = f"{r['fork_peak_mib']} / {r['copy_peak_mib']} MiB" if "fork_peak_mib" in r else "-"
        lines.append(
            f"| {r['checkpoint']} | {r['batch']} | {r['source_files']:,} | {r['fork_files']:,} / "
            f"{r['recovery_files']:,} = {r['files_ratio']:.2f} | {r['bytes_ratio']:.2f} | {r['fork_s']} | "
            f"{r['copy_s']} | {r['seconds_ratio']} | {peak} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--versions", type=int, default=1505)
    parser.add_argument("--s3-partitions", type=int, default=10)
    parser.add_argument("--s3-versions", type=int, default=305)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=["real", "synthetic", "s3"])
    parser.add_argument("--dir", help="work folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = []
        for part, run in (("real", _real), ("synthetic", _synthetic), ("s3", _s3)):
            if part not in args.skip:
                rows += run(args, Path(tmp))
    print(json.dumps(rows, indent=2))
    print(_table(rows))


if __name__ == "__main__":
    main()
