"""Corrupt or foreign input gives an error that names the file and what is wrong; nothing is guessed.

Every damaged case is derived from a checkpoint a real query wrote.
"""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

import pytest

from checkpoint.errors import CorruptFileError, NotACheckpointError, UnknownFormatVersionError
from checkpoint.format.changelog import read_changelog, read_header
from checkpoint.format.codec import Lz4BlockReader
from checkpoint.format.layout import FileKind
from checkpoint.model.checkpoint import load_checkpoint, state_partition_folders
from checkpoint.storage import Storage
from testbed.lz4java import frame, java_utf

U = "83f71141-5fc2-4c14-8508-70d55d699b3e"


def _committed_changelog(path: Path, batch: int) -> Path:
    ckpt = load_checkpoint(str(path))
    sid = next(iter(ckpt.stores))
    f = ckpt.stores[sid].file(FileKind.CHANGELOG, batch + 1, ckpt.committed_unique_id(batch, sid))
    return path / f.rel


def _read(path: Path, named_v2: bool = True):
    return read_changelog(io.BytesIO(path.read_bytes()).read, "lz4", str(path), named_v2=named_v2)


def test_flipped_byte_in_a_block_fails_its_checksum(copy_of) -> None:
    target = _committed_changelog(copy_of("long_chain"), 20)
    data = bytearray(target.read_bytes())
    (clen,) = struct.unpack_from("<i", data, 9)
    # LZ4 ends every block with literals: flipping its last byte changes the content, not the parse.
    data[21 + clen - 1] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum mismatch in lz4 block 0") as err:
        _read(target)
    assert str(target) in str(err.value)


@pytest.mark.parametrize("keep", [0.5, 0.98])
def test_truncated_changelog(copy_of, keep: float) -> None:
    target = _committed_changelog(copy_of("long_chain"), 20)
    data = target.read_bytes()
    target.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CorruptFileError, match="truncated"):
        _read(target)


def _real_body(copy_of) -> tuple[bytes, list]:
    """The decompressed body (records after the header) of a real v3 changelog and its records."""
    target = _committed_changelog(copy_of("long_chain"), 31)
    reader = Lz4BlockReader(io.BytesIO(target.read_bytes()).read, str(target))
    raw = reader.read(-1)
    (n,) = struct.unpack_from(">H", raw, 0)  # "v3"
    (m,) = struct.unpack_from(">H", raw, 2 + n)  # lineage
    return raw[4 + n + m :], _read(target)[1]


def test_header_is_read_from_the_first_block_only(copy_of) -> None:
    body, records = _real_body(copy_of)
    lineage = "[" + ",".join(f'{{"version":{v},"checkpointUniqueId":"{U}"}}' for v in range(1, 12)) + "]"
    records_only = body[:-4]  # the body ends with the end-of-records marker, int32 -1
    stream = frame(java_utf("v3") + java_utf(lineage) + records_only * 40 + body[-4:], block_size=1024)
    consumed = io.BytesIO(stream)
    header = read_header(consumed.read, "lz4", "mem", named_v2=True)
    assert [e.version for e in header.lineage] == list(range(1, 12))
    assert header.header_bytes == len(lineage)
    (first_block,) = struct.unpack_from("<i", stream, 9)
    assert stream.count(b"LZ4Block") > 5
    assert consumed.tell() == 21 + first_block  # the first block only, never the whole file
    _, again = read_changelog(io.BytesIO(stream).read, "lz4", "mem")
    assert again == records * 40


def test_unknown_changelog_version(copy_of) -> None:
    body, _ = _real_body(copy_of)
    stream = frame(java_utf("v7") + java_utf("[]") + body)
    with pytest.raises(UnknownFormatVersionError, match="'v7'.*v1, v2, v3, v4"):
        read_header(io.BytesIO(stream).read, "lz4", "state/0/0/1_x.changelog")


def test_v2_name_without_a_version_string_is_refused(copy_of) -> None:
    body, _ = _real_body(copy_of)
    with pytest.raises(CorruptFileError, match="must start with its version"):
        read_header(io.BytesIO(frame(body)).read, "lz4", "p", named_v2=True)


def test_truncated_zip(copy_of) -> None:
    path = copy_of("snapshots")
    ckpt = load_checkpoint(str(path))
    z = next(f for f in ckpt.files if f.kind == FileKind.ZIP)
    data = (path / z.rel).read_bytes()
    (path / z.rel).write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match="unreadable zip") as err:
        load_checkpoint(str(path)).read_snapshot(z)
    assert z.rel in str(err.value)


def test_a_zip_whose_end_record_points_past_its_start_is_a_finding_not_a_crash(copy_of) -> None:
    """Read through the file (over ZIP_WHOLE_BYTES, not whole into memory), a central directory's
    offset past the file made zipfile seek before its start: a real file raised EINVAL, no finding
    caught it, and `ckpt validate` ended in a traceback (a review's reproduction)."""
    import os
    import zipfile

    from checkpoint.analysis.checks import validate
    from checkpoint.format import ZIP_WHOLE_BYTES

    path = copy_of("snapshots")
    z = next(f for f in load_checkpoint(str(path)).files if f.kind == FileKind.ZIP)
    src, padded = zipfile.ZipFile(path / z.rel), io.BytesIO()
    with zipfile.ZipFile(padded, "w") as out:
        for info in src.infolist():
            out.writestr(info, src.read(info))
        out.writestr("padding", os.urandom(ZIP_WHOLE_BYTES + (1 << 20)))
    data = bytearray(padded.getvalue())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<L", data, end + 16, struct.unpack_from("<L", data, end + 16)[0] + (6 << 20))
    (path / z.rel).write_bytes(bytes(data))
    (path / z.rel).with_name(f".{Path(z.rel).name}.crc").unlink(missing_ok=True)
    ckpt = load_checkpoint(str(path), strict=False)
    with pytest.raises(CorruptFileError, match="unreadable zip"):
        ckpt.read_snapshot(next(f for f in ckpt.files if f.rel == z.rel))  # listed at its new size
    assert "ZIP_UNREADABLE" in {f.code for f in validate(ckpt).findings}


def test_zip_metadata_of_an_unknown_version(copy_of, tmp_path) -> None:
    import zipfile

    path = copy_of("snapshots")
    ckpt = load_checkpoint(str(path))
    z = next(f for f in ckpt.files if f.kind == FileKind.ZIP)
    src = zipfile.ZipFile(path / z.rel)
    rebuilt = tmp_path / "rebuilt.zip"
    with zipfile.ZipFile(rebuilt, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            out.writestr(info, b"v9\n" + data.split(b"\n", 1)[1] if info.filename == "metadata" else data)
    (path / z.rel).write_bytes(rebuilt.read_bytes())
    with pytest.raises(UnknownFormatVersionError, match="'v9'"):
        load_checkpoint(str(path)).read_snapshot(z)


def test_sidecar_detects_a_changed_file(copy_of) -> None:
    path = copy_of("snapshots")
    ckpt = load_checkpoint(str(path))
    crc = next(f for f in ckpt.files if f.kind == FileKind.SPARK_CRC and f.what.main.endswith(".changelog"))
    assert ckpt.sidecar_matches(crc)
    main = path / crc.what.main
    data = bytearray(main.read_bytes())
    data[-1] ^= 0xFF
    main.write_bytes(bytes(data))
    assert not ckpt.sidecar_matches(crc)


def test_unknown_commit_log_version_names_file_and_version(copy_of) -> None:
    path = copy_of("long_chain")
    body = (path / "commits" / "7").read_text().split("\n", 1)[1]
    (path / "commits" / "7").write_text("v9\n" + body)
    with pytest.raises(UnknownFormatVersionError) as err:
        load_checkpoint(str(path))
    assert "commits/7" in str(err.value) and "'v9'" in str(err.value) and "v1, v2, v3" in str(err.value)


def test_empty_commit_file(copy_of) -> None:
    path = copy_of("long_chain")
    (path / "commits" / "3").write_bytes(b"")
    with pytest.raises(CorruptFileError, match="commits/3: empty file"):
        load_checkpoint(str(path))


def test_commit_with_broken_json(copy_of) -> None:
    path = copy_of("long_chain")
    (path / "commits" / "3").write_text('v2\n{"nextBatchWatermarkMs":0,"stateUnique')
    with pytest.raises(CorruptFileError, match="commits/3: invalid JSON"):
        load_checkpoint(str(path))


def test_unknown_offset_version(copy_of) -> None:
    path = copy_of("join")
    text = (path / "offsets" / "2").read_text()
    (path / "offsets" / "2").write_text("v5" + text[2:])
    with pytest.raises(UnknownFormatVersionError, match="offsets/2"):
        load_checkpoint(str(path))


def test_folder_that_is_not_a_checkpoint(tmp_path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part-0.json").write_text("{}\n")
    with pytest.raises(NotACheckpointError, match="not a streaming checkpoint"):
        load_checkpoint(str(tmp_path))


def test_missing_path_and_a_file_instead_of_a_folder(tmp_path) -> None:
    with pytest.raises(NotACheckpointError, match="no such directory"):
        load_checkpoint(str(tmp_path / "nope"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotACheckpointError):
        load_checkpoint(str(tmp_path / "file"))


@pytest.mark.parametrize("listing", ["flat", "per_partition"])
def test_folders_named_with_digits_spark_never_writes_are_not_ours(copy_of, listing: str) -> None:
    """A superscript digit once stopped a listing with a bare ValueError (str.isdigit() took it,
    int() did not); another script's digit read as an operator. Both are unknown files now."""
    path = copy_of("snapshots")
    for odd in ("state/0/\u00b2", "state/\u0663/0", "state/\u00b2/0"):
        (path / odd).mkdir(parents=True)
        (path / odd / "1.zip").write_bytes(b"not ours")
    assert all("\u00b2" not in f and "\u0663" not in f for f in state_partition_folders(Storage(str(path))))
    odd_files = [f for f in load_checkpoint(str(path), listing=listing).files if not f.rel.isascii()]
    assert len(odd_files) == 3  # listed either way (per partition: by the listing of the rest)
    assert all(f.kind == FileKind.UNKNOWN for f in odd_files)


def _hadoop_crc(data: bytes, chunk: int = 512) -> bytes:
    import zlib

    sums = b"".join(zlib.crc32(data[i : i + chunk]).to_bytes(4, "big") for i in range(0, len(data), chunk))
    return b"crc\0" + chunk.to_bytes(4, "big") + sums


def test_hadoop_checksum_files_are_checked_chunk_by_chunk() -> None:
    """What Hadoop's local file system writes beside a file (`.<name>.crc`): a good file passes;
    a changed byte, a file cut or grown, and a malformed checksum file each fail by name."""
    from checkpoint.format.crc import check_hadoop_crc

    data = bytes(range(256)) * 7  # 1,792 bytes: three full chunks and a partial one
    crc = _hadoop_crc(data)
    assert check_hadoop_crc(io.BytesIO(data).read, crc, "x") == len(data)
    flipped = bytearray(data)
    flipped[1000] ^= 1
    cases = {
        "mismatch in bytes 512-1024": (bytes(flipped), crc),
        "shorter than": (data[:1000], crc),
        "longer than": (data[:1536] + b"!", _hadoop_crc(data[:1536])),
        "no crc header": (data, b"CRC\0" + crc[4:]),
        "chunk 0": (data, crc[:4] + (0).to_bytes(4, "big") + crc[8:]),
        "malformed Hadoop checksum file (chunk 512": (data, crc[:-1]),
    }
    for why, (body, sums) in cases.items():
        with pytest.raises(CorruptFileError, match=re.escape(why)):
            check_hadoop_crc(io.BytesIO(body).read, sums, "x")


def test_a_v1_state_file_streamed_in_parts_gives_the_records_a_whole_read_gives() -> None:
    """`stream_untyped_runs` (a migration's read of a big snapshot) cuts the decoded bytes at record
    boundaries: any part size gives the records of one whole parse, in order; a file cut short or
    followed by bytes after its marker is refused as a whole parse refuses it."""
    from checkpoint.format.changelog import parse_runs, records_of, stream_untyped_runs

    records = []
    for i in range(1200):  # varied records; one shape of puts, then of deletes (skipped in steps); varied
        varied = i < 300 or i >= 1000
        key = b"k%05d" % i * (1 + i % 7 if varied else 1)
        value = (None if i % 11 == 5 else b"v" * (i % 40)) if varied else None if i >= 800 else b"v" * 8
        records.append(struct.pack(">i", len(key)) + key + (struct.pack(">i", -1) if value is None
                       else struct.pack(">i", len(value)) + value))  # fmt: skip
    body = b"".join(records) + struct.pack(">i", -1)
    whole = list(records_of(parse_runs(body, False, "1.delta")))
    for chunk in (1, 7, 64, 1000, 1 << 20):
        parts = stream_untyped_runs(io.BytesIO(frame(body)).read, "lz4", "1.delta", chunk=chunk)
        assert [r for runs in parts for r in records_of(runs)] == whole, chunk
    cut = (body[:-9], "bad value length|truncated")
    for bad, why in (cut, (body[:-4], "truncated"), (body + b"x", "after the end-of-records marker")):
        with pytest.raises(CorruptFileError, match=why):
            list(stream_untyped_runs(io.BytesIO(frame(bad)).read, "lz4", "1.delta", chunk=64))


def test_a_forged_mapping_of_many_families_costs_one_pass_not_one_a_key() -> None:
    """`SnapshotMetadata.family_of` scanned every family for each key: a zip naming 30,000 families
    made the TTL reader's pass over a store quadratic. The mapping is read once per snapshot."""
    from checkpoint.format import parse_zip_metadata

    mapping = {f"f{i}": i for i in range(1, 30_001)}
    body = {"sstFiles": [], "numKeys": 0, "columnFamilyMapping": mapping, "maxColumnFamilyId": 30_000,
            "columnFamilyTypeMap": {"f7": True}}  # fmt: skip
    meta = parse_zip_metadata(b"v1\n" + json.dumps(body).encode(), "metadata")

    class Counted(dict):
        passes = 0

        def items(self):
            Counted.passes += 1
            return super().items()

    object.__setattr__(meta, "column_family_mapping", Counted(meta.column_family_mapping))
    keys = [i.to_bytes(2, "little") + b"k" for i in range(1, 2001)]
    assert [meta.family_of(k, "zip")[0] for k in keys] == list(range(1, 2001))
    assert meta.family_of((7).to_bytes(2, "little"), "zip") == (7, True)
    assert Counted.passes <= 1
