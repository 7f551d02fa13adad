"""Reads bounded by kind (docs/safety.md, `checkpoint.format.sizes`): a file's size is data. Spark's
`.crc` sidecars made 1.5 GB sparse files cost `validate --deep` 3.1 GB and `fork` 10.8 GB before
its one-line refusal (every sidecar read whole, side by side); a 1.5 GB source log took the
rehearsal's scratch to 4.5 GB before Spark started. Each is now a finding or a one-line refusal
in the memory of a normal run, by the kernel's count of the command's peak RSS."""

from __future__ import annotations

import json
import os

from tests.support.cli import measured
from tests.support.files import files_of

SPARSE = 1536 << 20  # 1.5 GiB of holes: nothing on disk
PEAK = 400 << 20  # a normal run of these commands peaks under 150 MB


def _sparse_sidecars(path) -> list:
    folder = path / "state" / "0" / "0"
    sidecars = sorted(p for p in folder.iterdir() if p.name.endswith(".crc") and not p.name.startswith("."))
    for p in sidecars:
        os.truncate(p, SPARSE)
    return sidecars


def test_a_sidecar_of_gigabytes_is_a_finding_not_an_allocation(copy_of, tmp_path) -> None:
    path = copy_of("snapshots")
    sidecars = _sparse_sidecars(path)
    assert sidecars
    before = files_of(path)
    out, peak = measured("validate", str(path), "--deep", "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    found = [f for f in json.loads(out.stdout)["findings"] if f["code"] == "FILE_OVER_ITS_BOUND"]
    assert found and all("where Spark writes at most 4096" in f["message"] for f in found), found
    assert peak < PEAK, peak
    out, peak = measured("fork", str(path), str(tmp_path / "fork"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and peak < PEAK, (peak, out.stderr)
    assert not (tmp_path / "fork").exists() and files_of(path) == before


def test_a_source_log_of_gigabytes_is_refused_by_the_rehearsal_before_spark(copy_of, tmp_path) -> None:
    path = copy_of("long_chain")
    logs = sorted((path / "sources" / "0").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    os.truncate(logs[-1], SPARSE)  # the replayed batch's own log
    before = files_of(path)
    out, peak = measured("rehearse", str(path), "--query", "tests.support.rehearsal:aggregation",
                         "--scratch-dir", str(tmp_path / "scratch"))  # fmt: skip
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "a line of more than 1048576 bytes" in out.stderr and peak < PEAK, (peak, out.stderr)
    assert not (tmp_path / "scratch").exists() and files_of(path) == before


def test_a_plan_or_a_schema_file_of_gigabytes_costs_no_memory(corpus, tmp_path) -> None:
    """The review: a cleanup plan's manifest grown to 1,000 MB took `ckpt fleet` to 2.78 GB (its
    header read as one line); a schema file made a 2 GiB sparse file was forked whole, 2 GiB of
    disk, and the fork validated."""
    from testbed.copying import copy_checkpoint

    root = tmp_path / "root"
    path = root / "q"
    copy_checkpoint(corpus["snapshots"], path)
    plan_out, _ = measured("gc", str(path))
    assert plan_out.returncode == 0, plan_out.stderr
    (manifest,) = (root / "_ckpt_audit").rglob("*.plan.jsonl")
    os.truncate(manifest, 1000 << 20)  # its header line never ends
    out, peak = measured("fleet", str(root), "--json")
    assert "Traceback" not in out.stderr and peak < PEAK, (peak, out.stderr)
    schema = next(p for p in path.glob("state/*/*/_metadata/schema") if p.is_file())
    os.truncate(schema, SPARSE)
    out, peak = measured("fork", str(path), str(tmp_path / "fork"))
    assert out.returncode == 2 and "FILE_OVER_ITS_BOUND" in out.stderr and peak < PEAK, (peak, out.stderr)
    assert not (tmp_path / "fork").exists()
