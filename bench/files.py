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
    python -m bench.files --s3 [--versions 500 5000] [--partitions 30]

With `--s3`, each checkpoint is uploaded to SeaweedFS on loopback (through s3fs, 1,000 objects a
batch) and the commands whose job is every file run on its `s3://` URL through the counting
proxy, where a listing is ListObjectsV2's pages of 1,000 keys: their seconds, peak RSS and
requests. S3 dates each object by its upload, so dormancy and quiet periods are told 1 s.
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
from testbed.synthetic import VERSION as SYNTHETIC_VERSION
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
    folder = base / f"v{SYNTHETIC_VERSION}-{partitions}x{versions}"
    where = folder / "root" / "checkpoint"
    if not (folder / "done").exists():
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        n = build(where, partitions, versions, link_same=True)
        took = round(time.perf_counter() - started)
        (folder / "done").write_text(json.dumps({"files": n, "seconds": took}))
    return where


def s3_commands(url: str, scratch: Path) -> dict[str, list[str]]:
    short = ["--dormant-after", "1s"]
    return {
        "lineage": [_CKPT, "lineage", url, "--json"],
        "fleet ROOT --held": [_CKPT, "fleet", url.rsplit("/", 1)[0], "--held", "--json", *short],
        "gc (plan only)": [_CKPT, "gc", url, "--json", "--quiet-period", "1s", "--unsafe-short-quiet-period"],
        "retire (plan only)": [
            _CKPT,
            "retire",
            url,
            "--no-archive",
            "--json",
            *short,
            "--unsafe-short-grace",
        ],
        "inspect": [_CKPT, "inspect", url, "--json"],
    }


def on_s3(args: argparse.Namespace) -> None:
    import os

    from testbed.s3server import s3_services
    from testbed.synthetic import iter_files, upload

    results: dict[str, dict[str, dict[str, float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-files-s3-") as tmp,
        s3_services(Path(tmp), "bench") as (
            server,
            proxy,
        ),
    ):
        fs = server.filesystem()
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint  # the children reach the store through it
        for versions in args.versions:
            started = time.perf_counter()
            n = upload(fs, f"bench/v{versions}/ckpt", iter_files(args.partitions, versions))
            took = time.perf_counter() - started
            print(f"== {n:,} objects ({args.partitions} x {versions}), uploaded in {took:.0f} s", flush=True)
            time.sleep(1.1)  # dormant after 1 s
            for name, command in s3_commands(f"s3://bench/v{versions}/ckpt", Path(tmp)).items():
                if args.only and not any(name.startswith(w) for w in args.only):
                    continue
                if fs.exists(f"bench/v{versions}/_ckpt_audit"):  # each command lists as its first run
                    fs.rm(f"bench/v{versions}/_ckpt_audit", recursive=True)
                proxy.reset()
                got = measure(command)
                got["requests"] = sum(proxy.counts().values())
                results.setdefault(name, {})[str(n)] = got
                print(f"  {name:24s} {got['seconds']:8.2f} s {got['peak_rss_mb']:8.1f} MB "
                      f"{got['requests']:8,} requests", flush=True)  # fmt: skip
    print(json.dumps({"s3": results}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--only", nargs="*", default=None, help="commands whose name starts with these words")
    parser.add_argument("--dir", type=Path, default=cache_home() / "bench-files")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command: the best time is kept")
    parser.add_argument("--s3", action="store_true", help="on SeaweedFS, through the counting proxy")
    parser.add_argument("--s3-partitions", type=int, default=30)
    args = parser.parse_args()
    if args.s3:
        args.partitions = args.s3_partitions
        on_s3(args)
        return

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
