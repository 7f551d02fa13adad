"""Checkpoints as Spark writes them by default (the HDFS-backed store, RocksDB format V1), written by
real queries (`testbed.defaults`), validated: healthy as written, their damage found and named,
every read command agreeing, an operator without its metadata refused."""

from __future__ import annotations

import json
import random
import zipfile

import pytest

from checkpoint.analysis.checks import Severity, ValidationOptions, validate
from checkpoint.format.layout import FileKind
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import checkpoint_lineage
from tests.support.cli import ckpt
from tests.support.damage import remove
from tests.support.defaults import chain_from_names, codes_of, copy_default


@pytest.mark.parametrize("deep", [False, True])
def test_a_healthy_default_checkpoint_has_no_error_and_no_unknown_file(defaults, deep) -> None:
    for name, path in defaults.items():
        full = load_checkpoint(str(path), strict=False)
        assert "unknown" not in full.count_by_kind(), name
        findings = validate(full, ValidationOptions(deep=deep)).findings
        assert [f for f in findings if f.severity == Severity.ERROR] == [], name
        # The one warning: a delta-only chain of 12, past the threshold of 10.
        assert {f.code for f in findings} <= ({"LONG_REPLAY_CHAIN"} if name == "hdfs_deltas" else set()), name


def test_a_delta_missing_inside_the_chain_breaks_it_by_name(defaults, tmp_path) -> None:
    path = copy_default(defaults, "hdfs_agg", tmp_path)
    # Spark's maintenance snapshots on a timer, so chains differ run to run: one of at least two deltas.
    entry = next(e for e in checkpoint_lineage(load_checkpoint(str(path))) if len(e.chain) >= 2)
    victim = entry.chain[0]
    remove(path / victim.rel)
    codes = codes_of(path)
    assert codes["REPLAY_CHAIN_BROKEN"] == [
        f"{victim.what.version}.delta is missing from the replay chain of version {entry.version}"
    ]
    result = ckpt("validate", str(path))
    assert result.returncode == 1 and f"{victim.what.version}.delta" in result.stdout


def test_a_missing_snapshot_falls_back_to_the_deltas_as_spark_does(defaults, tmp_path) -> None:
    """Recovery takes the newest snapshot there is: without it, an older one (or version 1) and
    more deltas. Nothing is broken while the deltas are there."""
    path = copy_default(defaults, "hdfs_agg", tmp_path)
    entry = checkpoint_lineage(load_checkpoint(str(path)))[0]
    remove(path / entry.base.rel)
    after = next(e for e in checkpoint_lineage(load_checkpoint(str(path))) if e.store == entry.store)
    assert after.snapshot_version < entry.snapshot_version and after.loadable
    assert after.chain_length == entry.chain_length + entry.snapshot_version - after.snapshot_version
    assert "REPLAY_CHAIN_BROKEN" not in codes_of(path)


@pytest.mark.parametrize("kind", [FileKind.SNAPSHOT, FileKind.DELTA])
def test_an_unreadable_snapshot_or_delta_is_named(defaults, tmp_path, kind) -> None:
    path = copy_default(defaults, "hdfs_agg", tmp_path)
    entry = checkpoint_lineage(load_checkpoint(str(path)))[0]
    victim = path / (entry.base.rel if kind == FileKind.SNAPSHOT else entry.chain[-1].rel)
    code = "SNAPSHOT_UNREADABLE" if kind == FileKind.SNAPSHOT else "DELTA_UNREADABLE"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])  # cut short: the LZ4 stream ends inside a block
    assert code not in codes_of(path)  # the size is not zero: only a read tells
    assert code in codes_of(path, deep=True)
    victim.write_bytes(b"")
    version = int(victim.name.split(".")[0])
    assert codes_of(path)[code] == [f"an empty file: Spark cannot read version {version} of the store"]


def test_a_format_v1_zip_with_a_flipped_byte_is_unreadable_to_a_deep_read(defaults, tmp_path) -> None:
    """Format V1 writes no sidecar: a byte flipped in an entry other than the metadata (which the
    shallow read parses) is told only by the entries' CRC-32s, which RocksDB's load checks as it
    unpacks the zip (`ckpt fork` refused such a copy after `validate --deep` passed it)."""
    path = copy_default(defaults, "rocksdb_v1", tmp_path)
    base = path / checkpoint_lineage(load_checkpoint(str(path)))[0].base.rel
    with zipfile.ZipFile(base) as zf:
        entry = max((i for i in zf.infolist() if i.filename != "metadata"), key=lambda i: i.compress_size)
    data = bytearray(base.read_bytes())
    # The entry's bytes follow its local header: 30 bytes, then its name and extra field, whose
    # lengths are the header's last two 2-byte fields.
    lengths = data[entry.header_offset + 26 : entry.header_offset + 30]
    start = (
        entry.header_offset
        + 30
        + int.from_bytes(lengths[:2], "little")
        + int.from_bytes(lengths[2:], "little")
    )
    data[start + entry.compress_size // 2] ^= 0xFF
    base.write_bytes(bytes(data))
    assert "ZIP_UNREADABLE" not in codes_of(path)  # the metadata reads
    [why] = codes_of(path, deep=True)["ZIP_UNREADABLE"]
    # A stored entry fails its CRC-32; a deflated one may fail to inflate first.
    assert why.startswith(f"{base}: ") and (entry.filename in why or "unreadable zip" in why), why
    result = ckpt("validate", str(path), "--deep")
    assert result.returncode == 1 and "ZIP_UNREADABLE" in result.stdout


def test_a_zip_past_what_is_read_whole_has_its_ssts_looked_up(defaults, tmp_path) -> None:
    """A zip over 4 MiB (`ZIP_WHOLE_BYTES`) was only looked up by the head-first read (`ckpt
    validate`), so none of the SSTs it lists was, and each was reported missing (and a fork refused
    the checkpoint). Its directory and metadata are read by seeking now."""
    path = copy_default(defaults, "rocksdb_v1", tmp_path)
    base = path / checkpoint_lineage(load_checkpoint(str(path)))[0].base.rel
    with zipfile.ZipFile(base, "a") as zf:  # an entry Spark would unpack beside RocksDB's files
        zf.writestr("padding.log", random.Random(7).randbytes(5 << 20))
        sst = json.loads(zf.read("metadata").decode().split("\n")[1])["sstFiles"][0]["dfsSstFileName"]
    for deep in ([], ["--deep"]):
        result = ckpt("validate", str(path), *deep)
        assert result.returncode == 0, result.stdout + result.stderr
    remove(base.parent / "SSTs" / sst)
    result = ckpt("validate", str(path))
    assert result.returncode == 1 and result.stdout.count("SST_MISSING") == 1, result.stdout


def test_a_zip_whose_sst_is_missing_is_named(defaults, tmp_path) -> None:
    path = copy_default(defaults, "rocksdb_v1", tmp_path)
    ckpt_ = load_checkpoint(str(path))
    entry = checkpoint_lineage(ckpt_)[0]
    listed = ckpt_.read_snapshot(entry.base).metadata.sst_files[0].dfs_name
    remove((path / entry.base.rel).parent / "SSTs" / listed)
    assert codes_of(path)["SST_MISSING"] == [f"listed by {entry.base.rel.rsplit('/', 1)[1]} but missing"]


def test_every_read_command_calls_a_default_checkpoint_healthy(defaults) -> None:
    path = defaults["hdfs_agg"]
    assert ckpt("validate", str(path)).returncode == 0
    doc = json.loads(ckpt("inspect", str(path), "--json").stdout)
    assert (doc["format_version"], doc["provider"]) == (1, "hdfs") and "unknown" not in doc["files"]
    lineage = json.loads(ckpt("lineage", str(path), "--json").stdout)["stores"]
    for s in lineage:  # Spark's own snapshots, wherever its timed maintenance wrote them
        base, steps = chain_from_names(path / f"state/0/{s['partition']}", s["version"], "snapshot", "delta")
        assert (s["snapshot_version"], s["chain_length"]) == (base, len(steps)) and base > 0, s
    scan = json.loads(ckpt("scan", str(path.parent), "--json").stdout)["checkpoints"]
    assert [(c["state_format"], c["health"]) for c in scan] == [("hdfs V1", "ok")]
    fleet = json.loads(ckpt("fleet", str(path.parent), "--json").stdout)["checkpoints"]
    assert [(r["state_format"], r["errors"]) for r in fleet] == [("hdfs V1", [])]


def test_an_operator_without_its_metadata_is_an_error_and_no_action_touches_the_checkpoint(
    defaults, tmp_path
) -> None:
    """A checkpoint last run before Spark 4.0 has no operator metadata, from which every store's
    files are named: read as it was, its whole state was invisible, so a cleanup planned every
    state file away (the retained chains included) and a fork copied none. Now validation names
    it, and cleanup, fork, compaction and migration refuse with the remedy, nothing changed."""
    from tests.support.files import files_of

    path = copy_default(defaults, "hdfs_agg", tmp_path)
    (path / "state/0/_metadata/metadata").unlink()
    before = files_of(path)
    assert "OPERATOR_METADATA_MISSING" in codes_of(path)
    for args in (
        ["gc", str(path), "--retain-batches", "2", "--apply"],
        ["fork", str(path), str(tmp_path / "f")],
        ["compact", str(path)],
        ["migrate", str(path), str(tmp_path / "m"), "--quiet-period", "0s", "--unsafe-short-quiet-period"],
    ):
        out = ckpt(*args)
        assert out.returncode == 2 and "run the query once on Spark 4.x" in out.stderr, (args, out.stderr)
    assert files_of(path) == before and not (tmp_path / "f").exists() and not (tmp_path / "m").exists()
