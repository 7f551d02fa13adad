"""Benchmark: `ckpt purge-expired` of a transformWithState store of `--entries` (10^6) entries with
a TTL, half expired, against Spark's own load of that store; and the restart's recovery before and
after the purge, in one run.

The checkpoint (cached outside the repo, `<cache>/bench-expiry-v1/<entries>`): one partition, the
testbed's `every_state` query (a ValueState, a ListState and a MapState, each with a TTL: three
entries a key). Its first batch writes half the keys with a TTL of ten years and Spark snapshots
it; the second writes the other half with a TTL of 1 ms (expired once the batch ends), snapshots
off: the latest version is a changelog over a zip, as a stopped query leaves it.

  Spark:   the state data source's read of every variable at the latest batch (the store loaded
           and scanned by Spark), best of two;
  ours:    `ckpt purge-expired` on a copy, in a fresh process under `/usr/bin/time -v`: seconds and
           peak RSS (that process does all the work: no Spark);
  restart: the query restarted with one new key on an untouched copy and on the purged one: the
           first batch's `triggerExecution` (its state loaded within it) and the bytes recovery
           reads (`ckpt lineage`), the rows Spark's reader shows before the batch.

    python -m bench.expiry [--entries 1000000]

With `--stores N`, the purge of N such stores (synthetic for scale: the one store copied into N
partitions, the logs and the operator's metadata saying N) by the Spark job, a task a store on
`local[2]` (`ckpt purge-expired`), against the same purge in one process, a store after another
(`checkpoint.expiry.purge_expired` without Spark, the purge before it ran as a Spark job). Each in
a fresh process under `/usr/bin/time -v`: seconds, and the peak RSS it reports (the largest of the
process and the descendants it waited for).

    python -m bench.expiry --stores 16 [--entries 1000000]
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
import zipfile
from pathlib import Path

from jobs.spark_session import local_session, scoped_confs
from testbed.cache import cache_home, cache_lock
from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from testbed.generators import _wait_for_snapshot
from testbed.operators import _DECADE_MS, _EXPIRES_MS, NO_EMPTY_BATCHES, every_state
from testbed.queries import NO_SNAPSHOTS

VERSION = 1
_ONE = {"spark.sql.shuffle.partitions": "1", "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"}
VARIABLES = ("count", "items", "last")


def _write(folder: Path, name: str, first: int, last: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "w") as f:
        for start in range(first, last, 100_000):
            f.write("".join(f'{{"id": {i}, "k": "k{i:09d}", "v": {i % 5}}}\n'
                            for i in range(start, min(last, start + 100_000))))  # fmt: skip


def _run(spark, inputs: Path, checkpoint: Path, ttl_ms: int, sink=None) -> dict:
    writer = every_state(spark, {"": str(inputs)}, 1, ttl_ms=ttl_ms).writeStream.outputMode("update")
    writer = writer.option("checkpointLocation", str(checkpoint))
    writer = writer.foreachBatch(sink) if sink else writer.format("noop")
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    return query.lastProgress or {}


def ensure_checkpoint(spark, entries: int) -> Path:
    """The cached scenario folder (`input/`, `checkpoint/`), generated in this session when missing."""
    out = cache_home() / f"bench-expiry-v{VERSION}" / str(entries)
    with cache_lock(out.parent):
        if (out / "done").exists():
            return out
        shutil.rmtree(out, ignore_errors=True)
        keys = entries // 3
        started = time.monotonic()
        with scoped_confs(spark, {**_ONE, **NO_EMPTY_BATCHES}):
            _write(out / "input", "part-00000.json", 0, keys // 2)
            _run(spark, out / "input", out / "checkpoint", _DECADE_MS)
            _wait_for_snapshot(out / "checkpoint")
            _write(out / "input", "part-00001.json", keys // 2, keys)
            with scoped_confs(spark, NO_SNAPSHOTS):
                _run(spark, out / "input", out / "checkpoint", _EXPIRES_MS)
        (out / "done").write_text(json.dumps({"keys": keys, "seconds": round(time.monotonic() - started, 1)}))
        return out


def _spark_load(spark, checkpoint: Path) -> float:
    started = time.perf_counter()
    for var in VARIABLES:
        spark.read.format("statestore").option("stateVarName", var).load(str(checkpoint)).count()
    return time.perf_counter() - started


def _rows(spark, checkpoint: Path) -> int:
    return sum(spark.read.format("statestore").option("stateVarName", v).load(str(checkpoint)).count()
               for v in VARIABLES)  # fmt: skip


# The purge in this process, a store after another, without Spark: the `StorePurges` port's default.
_IN_PROCESS = """
import json, sys, time
from checkpoint.expiry import PurgeOptions, purge_expired
from checkpoint.safety import AuditTrail, InPlace, taken_at_once
from checkpoint.storage import Storage
storage = Storage(sys.argv[1])
request = InPlace(storage, taken_at_once("bench"), AuditTrail(AuditTrail.default_for(storage.url)))
print(json.dumps(purge_expired(request, PurgeOptions(now=time.time())).as_dict()))
"""


def _purge(checkpoint: Path, in_process: bool = False) -> dict:
    """`ckpt purge-expired` (or the purge without Spark) in a fresh process under /usr/bin/time -v:
    its document, seconds, peak RSS."""
    ckpt = str(Path(sys.executable).parent / "ckpt")
    command = [sys.executable, "-c", _IN_PROCESS] if in_process else [ckpt, "purge-expired", "--json"]
    started = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-v", *command, str(checkpoint)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"purge failed:\n{out.stderr[-3000:]}")
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    rss = int(found.group(1)) * 1024 if found else 0
    return {"doc": json.loads(out.stdout), "seconds": seconds, "peak_rss": rss}


def _recovery_bytes(checkpoint: Path) -> int:
    """The bytes a recovery of the latest committed batch reads: each store's zip, the SSTs it
    lists, and the changelogs replayed on it."""
    from checkpoint.format import parse_zip_metadata, read_metadata_entry
    from checkpoint.model import checkpoint_lineage, load_head

    ckpt, total = load_head(str(checkpoint)), 0
    for entry in checkpoint_lineage(ckpt):
        base = entry.committed_file if entry.chain_length == 0 else entry.base
        assert base is not None
        with zipfile.ZipFile(checkpoint / base.rel) as zf:
            meta = parse_zip_metadata(read_metadata_entry(zf, base.rel), base.rel)
        total += base.info.size + sum(s.size for s in meta.sst_files) + sum(f.info.size for f in entry.chain)
    return total


_SHOWN = ("numRowsTotal", "numRowsRemoved", "memoryUsedBytes", "allRemovalsTimeMs", "commitTimeMs")


def _restart(spark, scenario: Path, checkpoint: Path, extra: Path) -> dict:
    """One more batch with one new key: its triggerExecution (ms), and what its state operator says."""
    _write(extra, "part-00002.json", 10**9, 10**9 + 1)
    glob = "/{" + str(scenario / "input").lstrip("/") + "," + str(extra).lstrip("/") + "}"
    with scoped_confs(spark, {**_ONE, **NO_EMPTY_BATCHES}):
        progress = _run(spark, Path(glob), checkpoint, _EXPIRES_MS)
    (op,) = progress["stateOperators"]
    custom = {
        k: v for k, v in op.get("customMetrics", {}).items() if "rocksdbSstFileSize" in k or "Removed" in k
    }
    return {
        "trigger_ms": progress["durationMs"]["triggerExecution"],
        **{k: op.get(k) for k in _SHOWN},
        **custom,
    }


def replicated(checkpoint: Path, dest: Path, stores: int) -> Path:
    """A copy of a one-partition checkpoint whose store is copied into `stores` partitions: the
    offset logs' shuffle partitions, the commit logs' unique ids (format V2) and the operator's
    metadata say so. Synthetic, for scale: a restart would find keys in partitions they do not
    hash to; the purge and Spark's reader read it as they read any."""
    copy_checkpoint(checkpoint, dest)
    for n in range(1, stores):
        shutil.copytree(dest / "state" / "0" / "0", dest / "state" / "0" / str(n))
    for log in [*(dest / "offsets").iterdir(), *(dest / "commits").iterdir()]:
        if not log.name.isdigit():
            continue
        header, meta, *rest = log.read_text().split("\n")
        doc = json.loads(meta)
        if log.parent.name == "offsets":
            doc["conf"]["spark.sql.shuffle.partitions"] = str(stores)
        for ids in doc.get("stateUniqueIds", {}).values():
            ids[:] = ids * stores
        log.write_text("\n".join([header, json.dumps(doc, separators=(",", ":")), *rest]))
        (log.parent / f".{log.name}.crc").unlink(missing_ok=True)
    for meta in (dest / "state" / "0" / "_metadata").rglob("[!.]*"):
        if meta.is_file():
            text = re.sub(r'"numPartitions":\d+', f'"numPartitions":{stores}', meta.read_text())
            meta.write_text(text)
            (meta.parent / f".{meta.name}.crc").unlink(missing_ok=True)
    return dest


def many_stores(spark, scenario: Path, work: Path, stores: int) -> dict:
    copies = {how: replicated(scenario / "checkpoint", work / how, stores) for how in ("spark", "in_process")}
    for copy in copies.values():
        date_to(copy, 3600)
    with scoped_confs(spark, {**_ONE, "spark.sql.shuffle.partitions": str(stores)}):
        rows_before = _rows(spark, copies["spark"])
    runs = {how: _purge(path, in_process=how == "in_process") for how, path in copies.items()}
    with scoped_confs(spark, {**_ONE, "spark.sql.shuffle.partitions": str(stores)}):
        rows_after = {how: _rows(spark, path) for how, path in copies.items()}
    docs = {how: r["doc"] for how, r in runs.items()}
    return {
        "stores": stores, "entries": docs["spark"]["entries"], "expired": docs["spark"]["expired"],
        "same_result": [s["expired"] for s in docs["spark"]["stores"]]
        == [s["expired"] for s in docs["in_process"]["stores"]] and len(set(rows_after.values())) == 1,
        "rows_spark_reads_before": rows_before, "rows_spark_reads_after": rows_after["spark"],
        **{f"{how}_seconds": round(r["seconds"], 2) for how, r in runs.items()},
        **{f"{how}_peak_rss_mib": round(r["peak_rss"] / 2**20) for how, r in runs.items()},
        "spark_over_in_process": round(runs["spark"]["seconds"] / runs["in_process"]["seconds"], 2),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--stores", type=int, default=0, help="the purge of this many stores, Spark's job "
                        "against one process")  # fmt: skip
    args = parser.parse_args()
    spark = local_session(master="local[2]", app_name="bench-expiry")
    work = Path(tempfile.mkdtemp(prefix="bench-expiry-"))
    try:
        scenario = ensure_checkpoint(spark, args.entries)
        if args.stores:
            print(json.dumps(many_stores(spark, scenario, work, args.stores), indent=1))
            return
        purged, control = work / "purged", work / "control"
        for copy in (purged, control):
            copy_checkpoint(scenario / "checkpoint", copy)
            date_to(copy, 3600)
        with scoped_confs(spark, _ONE):
            spark_seconds = min(_spark_load(spark, control) for _ in range(2))
            rows_before = _rows(spark, control)
        bytes_before = _recovery_bytes(control)
        purge = _purge(purged)
        bytes_after = _recovery_bytes(purged)
        with scoped_confs(spark, _ONE):
            rows_after = _rows(spark, purged)
        restarts = {label: _restart(spark, scenario, path, work / f"extra-{label}")
                    for label, path in (("untouched", control), ("purged", purged))}  # fmt: skip
        doc = purge["doc"]
        figures = {
            "entries": doc["entries"], "expired": doc["expired"], "expired_share": doc["expired_share"],
            "spark_load_seconds": round(spark_seconds, 2), "purge_seconds": round(purge["seconds"], 2),
            "purge_over_spark_load": round(purge["seconds"] / spark_seconds, 2),
            "purge_peak_rss_mib": round(purge["peak_rss"] / 2**20),
            "rows_spark_reads_before": rows_before, "rows_spark_reads_after": rows_after,
            "recovery_bytes_before": bytes_before, "recovery_bytes_after": bytes_after,
            "restart_untouched": restarts["untouched"], "restart_purged": restarts["purged"],
        }  # fmt: skip
        print(json.dumps(figures, indent=1))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
