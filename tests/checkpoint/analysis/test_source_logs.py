"""SOURCE_LOG_MISSING on offsets v2 (Spark 4.2+), on copies of the corpus' v1 checkpoints turned
into what Spark 4.3.0 writes: under source evolution a line per named source, its log in
`sources/<name>/` (a real one in tests/checkpoint/fork/test_named_sources.py); with the offsets'
format alone set to 2, a line per distinct source keyed by its last position in the plan, its log
in the folder numbered by its first. The v1 cases are in test_validate.py."""

from __future__ import annotations

import json
from pathlib import Path

from checkpoint.analysis.checks import Severity, validate
from checkpoint.model import Logs, load_head
from checkpoint.model.checkpoint import load_checkpoint

EVOLUTION = "spark.sql.streaming.queryEvolution.enableSourceEvolution"


def _offsets(path: Path) -> list[Path]:
    return sorted((p for p in (path / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _to_v2(path: Path, keys: list[str], named: bool) -> None:
    """Every offsets file as v2, line i keyed `keys[i]`; named, each `sources/<i>` renamed to its
    key as Spark names a named source's folder."""
    for f in _offsets(path):
        lines = f.read_text().split("\n")
        meta = json.loads(lines[1])
        meta["conf"][EVOLUTION] = "true" if named else "false"
        f.write_text(
            "\n".join(
                ["v2", json.dumps(meta), *(f"{k}:{line}" for k, line in zip(keys, lines[2:], strict=True))]
            )
        )
        (f.parent / f".{f.name}.crc").unlink(missing_ok=True)
    if named:
        for i, key in enumerate(keys):
            (path / "sources" / str(i)).rename(path / "sources" / key)


def _errors(path: Path) -> dict[str, list[str]]:
    """The error findings of the full listing's validation and of the head-first look, which must
    agree: {code: [path]}."""
    out = {}
    for label, ckpt in (("full", load_checkpoint(str(path), strict=False)),
                        ("head", load_head(str(path), strict=False, logs=Logs.RECOVERY))):  # fmt: skip
        found: dict[str, list[str]] = {}
        for f in validate(ckpt).findings:
            if f.severity == Severity.ERROR:
                found.setdefault(f.code, []).append(f.path.rsplit("/sources", 1)[-1])
        out[label] = found
    assert out["full"] == out["head"], out
    return out["full"]


def _newest_entry(path: Path, folder: str) -> Path:
    return max((path / "sources" / folder).glob("[0-9]*"), key=lambda p: int(p.name.split(".")[0]))


def test_named_sources_are_checked_in_their_named_folders(copy_of) -> None:
    path = copy_of("join")
    _to_v2(path, ["orders", "returns"], named=True)
    assert _errors(path) == {}
    _newest_entry(path, "returns").unlink()
    assert _errors(path) == {"SOURCE_LOG_MISSING": ["/returns"]}


def test_positions_of_a_source_read_twice_are_no_folders_and_no_damage(copy_of) -> None:
    """The watermark query's one source read twice, as Spark writes it: one line, keyed 1 (its last
    position), and its log in folder 0. Not taken for folder 1, which does not exist; its log's
    newest entry lost is damage still."""
    path = copy_of("watermark")
    for f in _offsets(path):
        lines = f.read_text().split("\n")
        f.write_text("\n".join(lines[:2] + lines[2:3]))  # one source, to be keyed by position 1
    _to_v2(path, ["1"], named=False)
    assert _errors(path) == {}
    _newest_entry(path, "0").unlink()
    assert list(_errors(path)) == ["SOURCE_LOG_MISSING"]


def test_positions_zero_to_n_are_the_folders(copy_of) -> None:
    path = copy_of("join")
    _to_v2(path, ["1", "0"], named=False)  # in a map's order
    (path / "sources" / "0").rename(path / "sources" / "x")
    (path / "sources" / "1").rename(path / "sources" / "0")
    (path / "sources" / "x").rename(path / "sources" / "1")
    assert _errors(path) == {}
    _newest_entry(path, "1").unlink()
    assert _errors(path) == {"SOURCE_LOG_MISSING": ["/1"]}


def test_a_forged_file_of_many_named_sources_says_a_few_and_counts_the_rest(copy_of) -> None:
    path = copy_of("join")
    _to_v2(path, ["orders", "returns"], named=True)
    newest = _offsets(path)[-1]
    lines = newest.read_text().split("\n")
    newest.write_text("\n".join(lines[:2] + [f'n{i}:{{"logOffset":3}}' for i in range(20_000)]))
    errors = [
        f for f in validate(load_head(str(path), strict=False)).findings if f.severity == Severity.ERROR
    ]
    assert len(errors) == 6 and "and 19995 more" in errors[-1].message


def test_a_forged_file_of_many_positions_is_checked_once_per_folder(copy_of) -> None:
    """20,000 positions from 1 (so not the folders): each line may be any folder's, and each
    folder's entries are looked up once, not once per line."""
    path = copy_of("watermark")
    _to_v2(path, ["0"], named=False)
    newest = _offsets(path)[-1]
    lines = newest.read_text().split("\n")
    entry = json.loads(lines[2].partition(":")[2])["logOffset"]
    newest.write_text("\n".join(lines[:2] + [f'{i}:{{"logOffset":{entry}}}' for i in range(1, 20_001)]))
    assert _errors(path) == {}  # folder 0 holds every line's entries
    _newest_entry(path, "0").unlink()
    errors = [
        f for f in validate(load_head(str(path), strict=False)).findings if f.severity == Severity.ERROR
    ]
    assert len(errors) == 1 and "and 19995 more" in errors[0].message
