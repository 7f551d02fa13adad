"""Names and numbers read from a checkpoint are data, not paths or sizes (docs/safety.md, "trust nothing
you did not write"). Every case is derived from a checkpoint a real query wrote, and run through
the `ckpt` command a user would type: one line on stderr, never a traceback, nothing written."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from checkpoint.errors import CorruptFileError
from checkpoint.format.snapshot import parse_zip_metadata
from tests.support import damage
from tests.support.cli import ckpt as run_ckpt
from tests.support.files import files_of

UUID = "83f71141-5fc2-4c14-8508-70d55d699b3e"


def ckpt(*args: str, memory: int | None = None) -> subprocess.CompletedProcess:
    return run_ckpt(*args, timeout=300, address_space=memory)


def _one_line_error(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stderr.strip().count("\n") == 0, out.stderr[-3000:]


def _base_zip(path: Path) -> Path:
    return damage.zip_files(path, damage.lineage_of(path))[-1]


def _name_first_sst(zip_path: Path, **names: str) -> None:
    """Rewrites the zip's metadata so that its first SST carries the given names, sidecar fixed."""
    with zipfile.ZipFile(zip_path) as zf:
        entries = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(zip_path, "w") as out:
        for info, data in entries:
            if info.filename == "metadata":
                head, body = data.decode().split("\n", 1)
                meta = json.loads(body)
                meta["sstFiles"][0].update(names)
                data = f"{head}\n{json.dumps(meta)}".encode()
            out.writestr(info, data)
    damage.fix_sidecar(zip_path)


@pytest.mark.parametrize(
    "names",
    [
        {"localFileName": "../../../../{outside}/x.sst"},
        {"localFileName": "/{outside}/x.sst"},
        {"dfsSstFileName": f"../../../../{{outside}}/000001-{UUID}.sst"},
        {"dfsSstFileName": f"000999-{UUID}.sst"},  # not the name Spark makes from the local one
    ],
)
def test_a_hostile_sst_name_is_an_error_finding_and_nothing_is_written(copy_of, tmp_path, names) -> None:
    """The reproduction: a zip whose metadata names an SST `../../../../<any folder>/x` validated as
    ok, and compaction wrote the SST's bytes there. Now validation reports ZIP_METADATA_INVALID,
    and compaction refuses before anything is read or written."""
    path = copy_of("watermark")
    outside = tmp_path / "outside"
    outside.mkdir()
    _name_first_sst(
        _base_zip(path), **{k: v.format(outside=str(outside).lstrip("/")) for k, v in names.items()}
    )
    before = files_of(path)
    validated = ckpt("validate", str(path), "--json")
    assert validated.returncode == 1
    codes = {f["code"] for f in json.loads(validated.stdout)["findings"]}
    assert "ZIP_METADATA_INVALID" in codes
    compacted = ckpt("compact", str(path), "--min-chain", "1", "--master", "local[1]")
    assert compacted.returncode == 2 and "ZIP_METADATA_INVALID" in compacted.stderr
    _one_line_error(compacted)
    forked = ckpt("fork", str(path), str(tmp_path / "fork"))
    assert forked.returncode == 2
    _one_line_error(forked)
    assert files_of(path) == before and not any(outside.iterdir())


@pytest.mark.parametrize(
    "ref",
    [
        {"localFileName": "000012.sst", "dfsSstFileName": "../SSTs/x.sst", "sizeBytes": 1},
        {"localFileName": "..", "dfsSstFileName": f"000012-{UUID}.sst", "sizeBytes": 1},
        {"localFileName": "000012.sst\n", "dfsSstFileName": f"000012-{UUID}.sst", "sizeBytes": 1},
        {"localFileName": 12, "dfsSstFileName": f"000012-{UUID}.sst", "sizeBytes": 1},
        {"localFileName": "000012.sst", "dfsSstFileName": f"000012-{UUID}.sst", "sizeBytes": -1},
    ],
)
def test_zip_metadata_names_only_what_spark_names(ref) -> None:
    with pytest.raises(CorruptFileError, match="zip metadata"):
        parse_zip_metadata(b"v1\n" + json.dumps({"sstFiles": [ref], "numKeys": 1}).encode(), "meta")


def test_a_zip_without_metadata_says_so_in_one_short_line(copy_of) -> None:
    path = copy_of("watermark")
    zip_path = _base_zip(path)
    with zipfile.ZipFile(zip_path, "w") as out:
        for i in range(20_000):
            out.writestr(f"{i:06d}.sst", b"")
    damage.fix_sidecar(zip_path)
    validated = ckpt("validate", str(path))
    assert validated.returncode == 1 and "ZIP_UNREADABLE" in validated.stdout
    assert len(validated.stdout) < 5_000 and "20000 entries" in validated.stdout


@pytest.mark.parametrize("batch", ["99999999999999999999", "9223372036854775806", "1" * 250])
def test_an_absurd_batch_id_is_a_one_line_answer_in_bounded_memory(copy_of, batch: str) -> None:
    """The reproduction: `commits/99999999999999999999` and `offsets/` of the same name made
    validation build a set of every id up to it (killed at 23 GB). Under a 1 GB address-space
    limit now: a name above Java's long is not a batch (Spark's own log reader skips it), and
    one within it is a gap that validation names in one span."""
    path = copy_of("snapshots")
    latest = max(int(p.name) for p in (path / "commits").iterdir() if p.name.isdigit())
    for log in ("commits", "offsets"):
        (path / log / batch).write_bytes((path / log / str(latest)).read_bytes())
    before = files_of(path)
    validated = ckpt("validate", str(path), memory=1 << 30)
    assert "Traceback" not in validated.stderr and "MemoryError" not in validated.stderr, validated.stderr
    if len(batch) <= 19 and int(batch) <= 2**63 - 1:
        assert validated.returncode == 1 and f"{latest + 1}-{int(batch) - 1}" in validated.stdout
        planned = ckpt("gc", str(path), memory=1 << 30)
        assert planned.returncode == 2 and "inconsistent" in planned.stderr
        _one_line_error(planned)
    else:
        assert validated.returncode == 0, validated.stdout + validated.stderr
    assert files_of(path) == before


def test_a_number_a_person_types_is_a_number_in_range(copy_of) -> None:
    """The review: `repartition --partitions 100001` ran five minutes and left a batch no undo could
    take back; `99999999999999999999999` failed inside Py4J after a backup; `gc --batch-size 0`,
    `-1` and `1e23`, `--long-chain -1` were taken. Each is refused as the argument is read (exit 2,
    argparse's own lines), nothing written."""
    path = copy_of("snapshots")
    before = files_of(path)
    cases = [("repartition", str(path), "--partitions", "100001"),
             ("repartition", str(path), "--partitions", "99999999999999999999999"),
             ("repartition", str(path), "--partitions", "0"),
             ("gc", str(path), "--batch-size", "0"), ("gc", str(path), "--batch-size=-1"),
             ("gc", str(path), "--batch-size", "1e23"), ("scan", str(path.parent), "--long-chain=-1"),
             ("fork", str(path), str(path.parent / "f"), "--batch=-3"),
             ("fork", str(path), str(path.parent / "f"), "--workers", "0")]  # fmt: skip
    for args in cases:
        out = ckpt(*args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr)
        assert "is not a whole number from" in out.stderr, (args, out.stderr)
    assert files_of(path) == before and not (path.parent / "f").exists()
