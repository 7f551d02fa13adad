"""Benchmark: discovery, the commit sensor and the fleet view over a fleet on an object store
(S3: SeaweedFS; Azure: Azurite; GCS: the GCS emulator; each on loopback, every request counted at
the proxy in front of it).

`--checkpoints` synthetic format V2 checkpoints (as `bench.sensor_scale` writes them locally, less
Hadoop's hidden checksums, which object stores have not), each retaining `--retained` batches of
offsets and commits (Spark's `minBatchesToRetain`, 100 by default), under one bucket or container, the
project's own sensors evaluated as the daemon evaluates them. Reported, each with its time and its
requests: discovery's first tick; the commit sensor's first round; idle ticks (requests per
checkpoint per tick); a busy tick after a tenth of the fleet committed; the cursor's size; `ckpt
fleet`; and the floor: a bare listing of every `commits/` folder through the same client, as many
at once as the sensor looks.

    python -m bench.sensor_stores [--store s3|azure|gcs] [--checkpoints 1000] [--retained 100] [--budget 30]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.sensor_scale import first_round_then_idle
from testbed import synthetic

BUCKET = "fleet"


@contextmanager
def _store(name: str, work: Path) -> Iterator[tuple[Any, Any, str, dict[str, Any]]]:
    """(a client past the proxy, the proxy, the fleet's root URL, the root's storage options), with
    the environment a deployment would give the store's client (never credentials in options)."""
    if name == "s3":
        from testbed.s3server import s3_services

        with s3_services(work, BUCKET) as (server, proxy):
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
            options = server.storage_options(proxy.endpoint)
            yield (
                server.filesystem(),
                proxy,
                f"s3://{BUCKET}",
                {k: v for k, v in options.items() if k not in ("key", "secret")},
            )
    elif name == "azure":
        from testbed.azurite import azurite_services

        with azurite_services(work, BUCKET) as (server, proxy):
            os.environ["AZURE_STORAGE_CONNECTION_STRING"] = server.connection_string(proxy.endpoint)
            yield server.filesystem(), proxy, f"az://{BUCKET}", {}
    else:
        from testbed.gcsserver import gcs_services

        with gcs_services(work, BUCKET) as (server, proxy):
            os.environ["STORAGE_EMULATOR_HOST"] = proxy.endpoint
            os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
            yield server.filesystem(), proxy, f"gs://{BUCKET}", {}


def _put(fs, folder: str, versions: int, retained: int) -> None:
    """One checkpoint, its files at once (the store's client sends them concurrently)."""
    files = synthetic.iter_files(1, versions, window=retained, snapshot_every=5)
    fs.pipe({f"{folder}/{rel}": data for rel, data in files if not rel.rsplit("/", 1)[-1].startswith(".")})


def _upload(fs, count: int, versions: int, retained: int) -> None:
    started = time.monotonic()
    for i in range(count):
        _put(fs, f"{BUCKET}/team-{i % 40:02d}/query-{i:05d}", versions, retained)
    print(f"uploaded {count} checkpoints ({time.monotonic() - started:.0f} s)")


def _per_checkpoint(counts, checkpoints: int) -> str:
    total = sum(counts.values())
    detail = ", ".join(f"{op} {n}" for op, n in sorted(counts.items()))
    return f"{total} requests ({detail}), {total / max(1, checkpoints):.2f} a checkpoint"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--store", choices=("s3", "azure", "gcs"), default="s3")
    parser.add_argument("--checkpoints", type=int, default=1000)
    parser.add_argument("--retained", type=int, default=100, help="batches of offsets and commits kept")
    parser.add_argument("--budget", type=float, default=30.0, help="the commit sensor's tick budget (s)")
    args = parser.parse_args()
    os.environ["CKPT_COMMIT_SENSOR_BUDGET"] = str(args.budget)

    import dagster as dg

    from assets.resources import CheckpointRoot, CheckpointRootsResource
    from cli.main import main as ckpt
    from orchestration import sensors

    with tempfile.TemporaryDirectory() as work, _store(args.store, Path(work)) as (fs, proxy, url, options):
        versions = args.retained + 6
        _upload(fs, args.checkpoints, versions, args.retained)
        roots = CheckpointRootsResource(roots=[CheckpointRoot(name="s", url=url, storage_options=options)])
        with dg.instance_for_test() as instance:
            proxy.reset()
            began = time.monotonic()
            found = sensors.checkpoint_discovery_sensor(
                dg.build_sensor_context(instance=instance, resources={"roots": roots})
            )
            took = time.monotonic() - began
            keys = sorted(instance.get_dynamic_partitions("checkpoints"))  # the tick added them
            runs = len(found.run_requests)
            print(f"discovery, first tick: {took:.1f} s, {len(keys)} partitions, {runs} audit run(s); "
                  f"{_per_checkpoint(proxy.counts(), len(keys))}")  # fmt: skip

            def tick(cursor: str | None, label: str) -> str | None:
                ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"roots": roots})
                proxy.reset()
                began = time.monotonic()
                result = sensors.checkpoint_commit_sensor(ctx)
                spent = time.monotonic() - began
                after = result.cursor if isinstance(result, dg.SensorResult) else ctx.cursor
                print(f"commit sensor, {label}: {spent:.1f} s (budget {args.budget:g} s), cursor "
                      f"{len(after or '')} bytes; {_per_checkpoint(proxy.counts(), len(keys))}")  # fmt: skip
                return after

            cursor, idle = first_round_then_idle(tick, len(keys), 3)

            store = roots.storage("s")
            folders = [f"{k.split(':', 1)[1]}/commits" for k in keys]
            proxy.reset()
            began = time.monotonic()
            with ThreadPoolExecutor(sensors.COMMIT_SENSOR_WORKERS) as pool:
                list(pool.map(store.list_dir, folders))
            bare = time.monotonic() - began
            floor = _per_checkpoint(proxy.counts(), len(keys))
            print(f"bare listing of every commits/ folder: {bare:.2f} s; {floor}")
            print(f"idle tick {min(idle):.2f} s: {min(idle) / bare:.2f}x the bare listing (target <= 3)")

            proxy.reset()
            began = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()):
                ckpt(["fleet", url, "--no-cleanup-plan", "--json"])
            took = time.monotonic() - began
            print(f"ckpt fleet --no-cleanup-plan: {took:.1f} s, {took / bare:.1f}x the bare listing; "
                  f"{_per_checkpoint(proxy.counts(), len(keys))}")  # fmt: skip

            busy = keys[:: max(1, len(keys) // max(1, len(keys) // 10))]
            for key in busy:  # one more version: a new commit each (the older files written again)
                _put(fs, f"{BUCKET}/{key.split(':', 1)[1]}", versions + 1, args.retained)
            tick(cursor, f"busy tick ({len(busy)} new commits)")


if __name__ == "__main__":
    main()
