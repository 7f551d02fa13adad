"""Benchmark: what the fourth safety round costs a local read, against the plain read it replaced,
in the same process.

Every local read now opens a regular file that resolves inside its checkpoint
(`checkpoint.storage.local.open_regular`: an open without following the last link and without
blocking, an `fstat`, a `readlink` of the descriptor), and the commit sensor's looks run in a
thread each may be abandoned from (`checkpoint.model.within_deadline`). This times both against
what they replaced, on `--files` small files with a real commit file's bytes: the heads of a
lineage read (`local_heads`), whole log reads (`cat_many`, as a checkpoint's logs are read), and
`--looks` trivial looks through `within_deadline` against a plain loop. Best of `--repeat`.

    python -m bench.fenced_reads [--files 10000] [--looks 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Callable

from checkpoint.model import within_deadline
from checkpoint.storage.local import LocalBackend, local_heads
from checkpoint.storage.regular import fence_of

COMMIT = b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["4e23fe8a-c049-4a42-9cc7-df9c54219994"]]}}'


def _best(repeat: int, run: Callable[[], object]) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _plain_heads(paths: list[str], ends: list[int]) -> list[bytes]:
    """The reads before this round: open, pread, close."""
    out = []
    for path, n in zip(paths, ends, strict=True):
        fd = os.open(path, os.O_RDONLY)
        try:
            out.append(os.pread(fd, n, 0))
        finally:
            os.close(fd)
    return out


def _plain_whole(paths: list[str]) -> dict[str, bytes]:
    out = {}
    for path in paths:
        with open(path, "rb") as f:
            out[path] = f.read()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--looks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fenced-") as tmp:
        folder = os.path.join(tmp, "ckpt", "commits")
        os.makedirs(folder)
        paths = [os.path.join(folder, str(i)) for i in range(args.files)]
        for path in paths:
            with open(path, "wb") as f:
                f.write(COMMIT)
        ends = [len(COMMIT)] * len(paths)
        fence = fence_of(os.path.join(tmp, "ckpt"))
        backend = LocalBackend(None)
        _plain_whole(paths)  # the page cache warm for both
        rows = [
            ("heads (lineage reads)", _best(args.repeat, lambda: local_heads(paths, ends, fence)),
             _best(args.repeat, lambda: _plain_heads(paths, ends))),
            ("whole files (log reads)", _best(args.repeat, lambda: backend.cat_many(paths, fence, 16 << 20)),
             _best(args.repeat, lambda: _plain_whole(paths))),
        ]  # fmt: skip
    keys = list(range(args.looks))
    looked = _best(
        args.repeat, lambda: within_deadline(keys, int, math.inf, 1, time.monotonic, 10.0, lambda k, t: -1)
    )
    rows.append(("sensor looks (a trivial look)", looked, _best(args.repeat, lambda: [int(k) for k in keys])))
    print("| what | n | fenced, µs each | before, µs each | ratio |\n|---|---:|---:|---:|---:|")
    for name, new, old in rows:
        n = args.looks if name.startswith("sensor") else args.files
        print(f"| {name} | {n:,} | {new / n * 1e6:.1f} | {old / n * 1e6:.1f} | {new / old:.2f} |")


if __name__ == "__main__":
    main()
