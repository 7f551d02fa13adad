"""Benchmark: planning an orphan cleanup of a 1,000,000-file checkpoint, against a naive baseline.

The synthetic checkpoint follows a real store's naming (V2 changelogs and zips with ids, lost
attempts, SSTs shared by snapshots, Spark `.crc` sidecars and Hadoop hidden crcs) and is written to
a local folder, files dated a month back. The baseline is what a tool without a format model does:
one listing, then one stat per file. Both run in this process through fsspec. Requests are the
calls our code makes to fsspec; on S3 a listing costs one request per 1000 keys, which the
S3-equivalent figures add.

    python -m bench.gc_plan [--partitions 300] [--versions 500] [--dir DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
import uuid
import zipfile
from collections import Counter
from pathlib import Path

from checkpoint.gc_plan import plan_gc
from checkpoint.model import load_checkpoint
from checkpoint.storage import Storage
from tests.support.lz4java import frame, java_utf

WINDOW = 100  # committed batches still in the commit log (Spark's default minBatchesToRetain)
SNAPSHOT_EVERY = 10
OLD = time.time() - 30 * 86400


def _uid(*parts: int) -> str:
    return str(uuid.UUID(int=hash(parts) & ((1 << 122) - 1) | (4 << 76)))


def _changelog(lineage: list[tuple[int, str]]) -> bytes:
    text = json.dumps([{"version": v, "checkpointUniqueId": u} for v, u in lineage], separators=(",", ":"))
    return frame(java_utf("v3") + java_utf(text) + b"\xff\xff\xff\xff")


def _zip(ssts: list[tuple[str, int]]) -> bytes:
    listed = [{"localFileName": n[:6] + ".sst", "dfsSstFileName": n, "sizeBytes": s} for n, s in ssts]
    meta = {"sstFiles": listed, "numKeys": 1, "numInternalKeys": 0, "columnFamilyMapping": {},
            "columnFamilyTypeMap": {}, "maxColumnFamilyId": 0}  # fmt: skip
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("CURRENT", b"MANIFEST-000005\n")
        zf.writestr("metadata", ("v1\n" + json.dumps(meta)).encode())
    return buf.getvalue()


def build(root: Path, partitions: int, versions: int) -> int:
    """Writes the synthetic checkpoint; returns its file count."""
    files: dict[str, bytes] = {"metadata": b'{"id":"bench"}'}
    first = versions - WINDOW
    for batch in range(first, versions):
        ids = [[_uid(p, batch + 1)] for p in range(partitions)]
        files[f"offsets/{batch}"] = (
            b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"logOffset":0}'
        )
        files[f"commits/{batch}"] = ("v2\n" + json.dumps({"nextBatchWatermarkMs": 0,
                                    "stateUniqueIds": {"0": ids}})).encode()  # fmt: skip
    files["state/0/_metadata/metadata"] = (
        'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
        f'"stateStoreInfo":[{{"storeName":"default","numColsPrefixKey":0,"numPartitions":{partitions}}}]}}'
    ).encode()
    empty = b""
    for p in range(partitions):
        d = f"state/0/{p}"
        last_zip = 0
        for v in range(1, versions + 1):
            u = _uid(p, v)
            lineage = [(x, _uid(p, x)) for x in range(max(1, last_zip), v)]
            # Only the changelogs the window's lineages read need real bytes.
            files[f"{d}/{v}_{u}.changelog"] = _changelog(lineage) if v > first else empty
            for name in (f"{v}_{u}.changelog.crc", f".{v}_{u}.changelog.crc", f".{v}_{u}.changelog.crc.crc"):
                files[f"{d}/{name}"] = empty
            if v % 2 == 0:  # a lost attempt every other version
                a = _uid(p, v, 1)
                for name in (f"{v}_{a}.changelog", f"{v}_{a}.changelog.crc", f".{v}_{a}.changelog.crc",
                             f".{v}_{a}.changelog.crc.crc"):  # fmt: skip
                    files[f"{d}/{name}"] = empty
            if v % SNAPSHOT_EVERY == 0:
                ssts = [(f"{v:06d}-{_uid(p, v, 9)}.sst", 1), (f"{v + 1:06d}-{_uid(p, v, 8)}.sst", 1)]
                if last_zip:  # shares the previous snapshot's first SST, as RocksDB does
                    ssts.append((f"{last_zip:06d}-{_uid(p, last_zip, 9)}.sst", 1))
                files[f"{d}/{v}_{u}.zip"] = _zip(ssts)
                files[f"{d}/{v}_{u}.zip.crc"] = empty
                for name, _ in ssts[:2]:
                    files[f"{d}/SSTs/{name}"] = b"x"
                    files[f"{d}/SSTs/.{name}.crc"] = empty
                last_zip = v
    for rel in {str(Path(r).parent) for r in files}:
        (root / rel).mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        path = root / rel
        path.write_bytes(data)
        os.utime(path, (OLD, OLD))
    return len(files)


class Counting:
    def __init__(self, fs):
        self._fs, self.calls = fs, Counter()

    def __getattr__(self, name):
        attr = getattr(self._fs, name)
        if name not in {"find", "cat", "cat_file", "open", "info", "ls"}:
            return attr

        def call(*args, **kwargs):
            self.calls[name] += 1
            if name == "cat" and isinstance(args[0], list):
                self.calls["cat_files"] += len(args[0])
            return attr(*args, **kwargs)

        return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--versions", type=int, default=500)
    parser.add_argument("--dir", type=Path, help="where to build it (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp) / "ckpt"
        t = time.perf_counter()
        n = build(root, args.partitions, args.versions)
        print(f"synthetic checkpoint: {n:,} files ({time.perf_counter() - t:.0f} s to build)", flush=True)
        report(root, n)


def report(root: Path, n: int) -> None:
    storage = Storage(str(root))
    fs = storage.fs
    t = time.perf_counter()
    listed = fs.find(str(root), detail=False)
    for path in listed:
        fs.info(path)
    baseline = time.perf_counter() - t

    counting = Counting(fs)
    storage.fs = counting
    t = time.perf_counter()
    ckpt = load_checkpoint(storage)
    loaded = time.perf_counter() - t
    plan = plan_gc(ckpt)
    planning = time.perf_counter() - t
    calls = counting.calls
    ranged, whole = calls["open"], calls["cat_files"] + calls["cat_file"]
    pages = -(-n // 1000)
    ours_s3 = pages + ranged + whole
    base_s3 = pages + len(listed)
    reasons = {k: v["files"] for k, v in plan.totals("reason").items()}
    print(f"plan: {plan.files:,} candidates {reasons}, {plan.retained_files:,} retained")
    print(
        f"baseline, a listing and a stat per file: {baseline:.1f} s; "
        f"{1 + len(listed):,} calls, {base_s3:,} on S3"
    )
    print(
        f"planner: {planning:.1f} s (loading {loaded:.1f} s); {calls['find']} listing, {ranged:,} ranged "
        f"reads (lineage headers, zip metadata), {whole:,} small whole-file reads; {ours_s3:,} requests on S3"
    )
    print(
        f"planner / baseline: time {planning / baseline:.2f}; S3 requests per 1000 objects "
        f"{1000 * ours_s3 / n:.1f} vs {1000 * base_s3 / n:.1f} ({ours_s3 / base_s3:.3f})"
    )


if __name__ == "__main__":
    main()
