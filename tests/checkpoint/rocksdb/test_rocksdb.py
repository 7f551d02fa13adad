"""`checkpoint.rocksdb` alone, as compaction and migration use it: a store written in RocksDB here
(`writer`) and published as Spark reads a snapshot (`publishing`): the SSTs first under new
names, the zip in Spark's order with its metadata, its `.crc` sidecar where the format writes one,
and nothing written at all when a name is taken. Spark reading what this writes is proven by the
restarts of compaction's and migration's tests."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from checkpoint.errors import RebuildError
from checkpoint.format import ROCKSDB_FILES, FileKind, crc32c_signed
from checkpoint.format.crc import parse_sidecar
from checkpoint.format.snapshot import SnapshotMetadata, SstRef, read_snapshot
from checkpoint.policy import POLICY
from checkpoint.rocksdb import SPARK_OPTIONS, ZipTarget, merge_delimiter, open_db, publish, set_options
from checkpoint.rocksdb.writer import option_values, write_in_batches
from checkpoint.storage import Storage

FOLDER = "state/0/0"
UID = "0b6a4d4e-8b1c-4d9e-9a0f-1c2d3e4f5a6b"


def _written(tmp_path: Path, keys: int) -> Path:
    """A RocksDB of `keys` keys, written in bounded batches and checkpointed as a rebuild does."""
    import rocksdict

    db = open_db(tmp_path / "db", POLICY)
    opts = rocksdict.WriteOptions()
    keys_ = [f"k{i:06d}".encode() for i in range(keys)]
    write_in_batches(db, opts, 1000, "put", keys_, [b"v" * 20] * keys)
    db.flush()
    out = tmp_path / "checkpoint"
    rocksdict.Checkpoint(db).create_checkpoint(str(out))
    db.close()
    set_options(out, SPARK_OPTIONS)
    return out


def _zip(storage: Storage, rel: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(storage.read_bytes(rel, limit=1 << 30)))


@pytest.mark.parametrize("unique_id", [None, UID], ids=["v1", "v2"])
def test_a_store_is_published_as_spark_reads_a_snapshot(tmp_path: Path, unique_id: str | None) -> None:
    built = _written(tmp_path, 5000)
    storage = Storage(str(tmp_path / "ckpt"))
    sidecar = unique_id is not None  # as `ZipTarget.of` asks the format (V2 writes sidecars)
    out = publish(ZipTarget(storage, FOLDER, 7, unique_id, sidecar), built, None, 5000, 0)
    name = ROCKSDB_FILES.name(FileKind.ZIP, 7, unique_id)
    assert out["zip"] == f"{FOLDER}/{name}" and out["reused"] == 0 and out["written"] >= 1
    snap = read_snapshot(io.BytesIO(storage.read_bytes(out["zip"], limit=1 << 30)), out["zip"])
    assert snap.metadata.num_keys == 5000 and snap.metadata.version == 1
    # Each SST it lists is in the store's SSTs folder, under a name no other snapshot has, whole.
    for ref in snap.metadata.sst_files:
        assert storage.stat(f"{FOLDER}/SSTs/{ref.dfs_name}").size == ref.size
        assert ref.dfs_name != ref.local_name and ref.dfs_name.startswith(ref.local_name[: -len(".sst")])
    # Spark's order: the manifest, CURRENT, then the options, the metadata last; no rocksdict file.
    names = _zip(storage, out["zip"]).namelist()
    assert names[0].startswith("MANIFEST-") and names[1] == "CURRENT" and names[-1] == "metadata"
    assert not [n for n in names if "rocksdict" in n]
    crc = storage.read_if_exists(f"{out['zip']}.crc", limit=4096)
    if sidecar:
        got = parse_sidecar(crc or b"", "crc")
        data = storage.read_bytes(out["zip"], limit=1 << 30)
        assert (got.value, got.main_file_size) == (crc32c_signed(data), len(data))
    else:
        assert crc is None


def test_the_bases_ssts_are_listed_again_not_uploaded(tmp_path: Path) -> None:
    """An SST the base zip lists with the same name and size is the same file: the new zip lists
    the base's DFS name, and nothing is uploaded for it."""
    built = _written(tmp_path, 2000)
    storage = Storage(str(tmp_path / "ckpt"))
    ssts = sorted(built.glob("*.sst"))
    base = SnapshotMetadata(
        tuple(SstRef(p.name, f"{p.stem}-{UID}.sst", p.stat().st_size) for p in ssts), 2000
    )
    for ref in base.sst_files:  # the base's SSTs, as the checkpoint holds them
        storage.write(f"{FOLDER}/SSTs/{ref.dfs_name}", (built / ref.local_name).read_bytes())
    before = {f.rel for f in storage.list_files()}
    out = publish(ZipTarget(storage, FOLDER, 8, None, False), built, base, 2000, 0)
    assert out["reused"] == len(ssts) and out["written"] == 0
    assert {f.rel for f in storage.list_files()} - before == {out["zip"]}
    listed = json.loads(_zip(storage, out["zip"]).read("metadata").decode().split("\n", 1)[1])["sstFiles"]
    assert [r["dfsSstFileName"] for r in listed] == [r.dfs_name for r in base.sst_files]


@pytest.mark.parametrize("taken", ["7.zip", "7.zip.crc", ".7.zip.crc", ".7.zip.crc.crc"])
def test_a_taken_name_refuses_before_a_byte_is_written(tmp_path: Path, taken: str) -> None:
    built = _written(tmp_path, 100)
    storage = Storage(str(tmp_path / "ckpt"))
    storage.write(f"{FOLDER}/{taken}", b"left over")
    with pytest.raises(RebuildError, match="already exists"):
        publish(ZipTarget(storage, FOLDER, 7, None, False), built, None, 100, 0)
    assert [f.rel for f in storage.list_files()] == [f"{FOLDER}/{taken}"]


def test_a_sidecar_that_cannot_be_written_withdraws_its_zip(tmp_path: Path, monkeypatch) -> None:
    """Half a publish (a zip without the sidecar Spark checks it against) is not left behind."""
    built = _written(tmp_path, 100)
    storage = Storage(str(tmp_path / "ckpt"))
    real = Storage.write_if_absent

    def full_disk(self, rel: str, data: bytes, temp_prefix: str):
        if rel.endswith(".crc"):
            raise OSError(28, "No space left on device")
        return real(self, rel, data, temp_prefix)

    monkeypatch.setattr(Storage, "write_if_absent", full_disk)
    with pytest.raises(RebuildError, match="sidecar was not published .* the zip was withdrawn"):
        publish(ZipTarget(storage, FOLDER, 7, UID, True), built, None, 100, 0)
    assert not [f for f in storage.list_files() if f.rel.endswith(".zip")]


def test_the_merge_delimiter_follows_the_pinned_operator_version() -> None:
    assert merge_delimiter({}) == b","  # before Spark pinned it: its first merge operator
    assert merge_delimiter({"spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "2"}) == b""
    with pytest.raises(RebuildError, match="the merge semantics are not known"):
        merge_delimiter({"spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "9"})


def test_the_options_spark_loads_are_written_into_the_checkpoint(tmp_path: Path) -> None:
    built = _written(tmp_path, 10)
    assert option_values(built, SPARK_OPTIONS) == SPARK_OPTIONS


def test_a_bases_sst_downloads_are_watched_as_the_look_is(copy_of, tmp_path: Path, monkeypatch) -> None:
    """`ckpt fleet --expired` fetches a base's SSTs inside a look, in a pool: the second review found
    them unseen there, so a look storage kept answering was given up as silent, and its pool went on
    downloading after it was."""
    import math
    import time

    from checkpoint.model import checkpoint_lineage, load_head, within_deadline
    from checkpoint.rocksdb.fetch import fetch_base
    from tests.support.throttle import (
        StillUntilBegun,
        assert_stopped_with_its_look,
        noting_give_ups,
        throttled,
    )

    path = copy_of("snapshots")
    sent = throttled(monkeypatch, ("download",), at_once=1, pause=0.05)
    ckpt = load_head(Storage(str(path)))
    entry = max((e for e in checkpoint_lineage(ckpt) if e.base is not None), key=lambda e: e.base.info.size)

    clock = StillUntilBegun()

    def look(n: int) -> int:
        clock.begun()
        work = tmp_path / f"look-{n}-{time.monotonic_ns()}"
        (work / "db").mkdir(parents=True)
        return len(fetch_base(ckpt, entry.base, entry.base.rel.rsplit("/", 1)[0], work, POLICY, 0).ssts)

    ssts = look(0)
    # Unseen, the pool's downloads (0.05 s each, one at a time) leave storage silent for longer
    # than the timeout: the look was given up though every download was answered.
    assert ssts >= 3, "a base of a few SSTs, each a download"
    watched = len(sent)
    assert within_deadline([0], look, math.inf, 1, time.monotonic, 0.12, lambda i, t: -1) == {0: ssts}
    gave_up: list[float] = []
    clock = StillUntilBegun()  # still until this look begins (the looks above ran it)
    assert within_deadline([0], look, 0.01, 1, clock, 0.12, noting_give_ups(gave_up)) == {0: -1}
    time.sleep(0.3)
    assert_stopped_with_its_look(sent[watched:], gave_up[0])
