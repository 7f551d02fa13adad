"""Benchmark: every command on one checkpoint of 10^6 files and on one of 10^7, each in a fresh
process under `/usr/bin/time -v` (seconds, peak RSS), against the floor of a listing of `commits/`.

The checkpoints are synthetic (testbed/synthetic.py, format V2 on RocksDB): the same partitions
and the same replay chains at the latest batch, ten times the versions of history in the second.
Files with the same bytes are hard links to one another, so 10^7 files take the inodes of their
distinct contents; every command lists and reads them as any other files. They are built once
into the cache (`~/.cache/ckpt-maint/bench-files`, or `--dir`), outside the repository and the
suite: the 10^7 one takes about 10 minutes and 1 GB of directory entries.

What each command should cost: memory for a page of the listing (of one folder's files on a
local disk), never the checkpoint's files, so peak RSS moves little from 10^6 to 10^7; seconds in
proportion to the files only for the commands whose job is every file (`inspect`, `gc`,
`retire`, `fleet --held`), the others reading what recovery reads. Each command's audit trail is
removed before it runs, so that each lists as its first run would.

    python -m bench.files [--versions 500 5000] [--partitions 300] [--only inspect retire] [--dir DIR]
                          [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.cache import cache_home
from testbed.synthetic import build

_CKPT = str(Path(sys.executable).parent / "ckpt")
_FLOOR = "import sys; from checkpoint.storage import Storage; Storage(sys.argv[1]).list_dir('commits')"


def commands(checkpoint: Path, scratch: Path) -> dict[str, list[str]]:
    root = str(checkpoint.parent)
    return {
        "list commits/ only (the floor)": [sys.executable, "-c", _FLOOR, str(checkpoint)],
        "lineage": [_CKPT, "lineage", str(checkpoint), "--json"],
        "validate": [_CKPT, "validate", str(checkpoint), "--json"],
        "scan ROOT": [_CKPT, "scan", root, "--json"],
        "fleet ROOT": [_CKPT, "fleet", root, "--json"],
        "fleet ROOT --held": [_CKPT, "fleet", root, "--held", "--json"],
        "gc (plan only)": [_CKPT, "gc", str(checkpoint), "--json"],
        "fork (latest batch)": [_CKPT, "fork", str(checkpoint), str(scratch / "fork"), "--json"],
        "retire (plan only)": [_CKPT, "retire", str(checkpoint), "--no-archive", "--json"],
        "inspect": [_CKPT, "inspect", str(checkpoint), "--json"],
    }


def measure(command: list[str], repeat: int = 1, before=lambda: None) -> dict[str, float]:
    """Seconds (the best of `repeat` runs, `before` each) and peak RSS (MB, the largest) of one
    command in a fresh process each run; a failure raises."""
    runs = []
    for _ in range(repeat):
        before()
        runs.append(_once(command))
    return {"seconds": min(r["seconds"] for r in runs), "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)}


def _once(command: list[str]) -> dict[str, float]:
    started = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if out.returncode not in (0, 1):  # 1: findings, which a synthetic checkpoint may have
        raise RuntimeError(f"{command[1:3]} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    rss = round(int(found.group(1)) / 1024, 1) if found else 0.0
    return {"seconds": round(seconds, 2), "peak_rss_mb": rss}


def checkpoint_of(base: Path, partitions: int, versions: int) -> Path:
    """The synthetic checkpoint, built once (a half-built one, without its `done` marker, again)."""
    folder = base / f"{partitions}x{versions}"
    where = folder / "root" / "checkpoint"
    if not (folder / "done").exists():
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        n = build(where, partitions, versions, link_same=True)
        took = round(time.perf_counter() - started)
        (folder / "done").write_text(json.dumps({"files": n, "seconds": took}))
    return where


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--only", nargs="*", default=None, help="commands whose name starts with these words")
    parser.add_argument("--dir", type=Path, default=cache_home() / "bench-files")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command: the best time is kept")
    args = parser.parse_args()

    results: dict[str, dict[str, dict[str, float]]] = {}
    sizes = {}
    for versions in args.versions:
        checkpoint = checkpoint_of(args.dir, args.partitions, versions)
        files = json.loads((checkpoint.parent.parent / "done").read_text())["files"]
        sizes[versions] = files
        shape = f"{args.partitions} partitions x {versions} versions"
        print(f"== {files:,} files ({shape}): {checkpoint}", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
            for name, command in commands(checkpoint, Path(tmp)).items():
                if args.only and not any(name.startswith(w) for w in args.only):
                    continue

                def fresh(tmp: str = tmp, checkpoint: Path = checkpoint) -> None:
                    shutil.rmtree(checkpoint.parent / "_ckpt_audit", ignore_errors=True)
                    shutil.rmtree(Path(tmp) / "fork", ignore_errors=True)

                got = measure(command, args.repeat, fresh)
                results.setdefault(name, {})[str(files)] = got
                print(f"  {name:32s} {got['seconds']:8.2f} s {got['peak_rss_mb']:8.1f} MB", flush=True)
        shutil.rmtree(checkpoint.parent / "_ckpt_audit", ignore_errors=True)

    if len(sizes) == 2:
        small, big = (str(sizes[v]) for v in args.versions)
        print(f"\n| command | {int(small):,} files | {int(big):,} files | seconds x | peak RSS x |")
        print("|---|---:|---:|---:|---:|")
        for name, by in results.items():
            if small in by and big in by:
                a, b = by[small], by[big]
                cells = [f"{x['seconds']} s, {x['peak_rss_mb']} MB" for x in (a, b)]
                ratios = b["seconds"] / a["seconds"], b["peak_rss_mb"] / a["peak_rss_mb"]
                print(f"| {name} | {cells[0]} | {cells[1]} | {ratios[0]:.2f} | {ratios[1]:.2f} |")
    print(json.dumps({"files": sizes, "results": results}))


if __name__ == "__main__":
    main()
