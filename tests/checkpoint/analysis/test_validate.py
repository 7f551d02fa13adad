"""Each finding code, produced by a damaged copy of a real checkpoint, and only that code."""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from checkpoint.analysis.checks import CODES, Severity, ValidationOptions, validate
from checkpoint.format.layout import FORK_STARTED
from checkpoint.format.spark import PROVIDER_CONF
from checkpoint.model.checkpoint import load_checkpoint
from testbed.copying import copy_checkpoint
from tests.support import damage


def codes(path: Path, deep: bool = False, **options) -> Counter:
    found = validate(
        load_checkpoint(str(path), strict=False), ValidationOptions(deep=deep, **options)
    ).findings
    return Counter(f.code for f in found)


def test_healthy_corpus_has_no_error_findings(corpus) -> None:
    for name, path in corpus.items():
        for deep in (False, True):
            v = validate(load_checkpoint(str(path), strict=False), ValidationOptions(deep=deep))
            assert v.ok, (name, [f.as_dict() for f in v.findings if f.severity == Severity.ERROR])
            assert {f.code for f in v.findings} <= {"LONG_REPLAY_CHAIN"}, name


def _commits(path: Path, batch: int) -> Path:
    return path / "commits" / str(batch)


def _offsets_conf(path: Path, batch: int, key: str, value: str) -> None:
    target = path / "offsets" / str(batch)
    head, meta, *sources = target.read_text().split("\n")
    body = json.loads(meta)
    body["conf"][key] = value
    target.write_text("\n".join([head, json.dumps(body), *sources]))


def _copy_offsets(path: Path, src: int, dst: int) -> None:
    shutil.copy(path / "offsets" / str(src), path / "offsets" / str(dst))


def _source_entry(path: Path, source: int = 0) -> Path:
    """The entry of a file source's log the newest offsets name (`{"logOffset": N}`: `sources/<i>/N`)."""
    newest = max((p for p in (path / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    line = newest.read_text().split("\n")[2 + source]
    return path / "sources" / str(source) / str(json.loads(line)["logOffset"])


def _committed(path: Path) -> Path:
    return path / damage.lineage_of(path).committed_file.rel


def _chain_changelog(path: Path, index: int) -> Path:
    return path / damage.lineage_of(path).chain[index].rel


def _beside_the_zip(path: Path) -> Path:
    """The changelog of a committed version that has its zip too (the first store that has one:
    Spark's maintenance picks which versions get a snapshot)."""
    from checkpoint.model import checkpoint_lineage

    own = [e for e in checkpoint_lineage(load_checkpoint(str(path))) if e.loads_own_base]
    assert own, "no store loads its own zip"
    assert own[0].committed_file is not None
    return (path / own[0].committed_file.rel).with_suffix(".changelog")


def _base_zip(path: Path) -> Path:
    return path / damage.lineage_of(path).base.rel


def _first_sst(path: Path) -> Path:
    base = _base_zip(path)
    meta = zipfile.ZipFile(base).read("metadata").decode().split("\n")[1]
    return base.parent / "SSTs" / json.loads(meta)["sstFiles"][0]["dfsSstFileName"]


def _rewrite_zip_metadata(path: Path) -> None:
    base = _base_zip(path)
    entries = [(i, zipfile.ZipFile(base).read(i)) for i in zipfile.ZipFile(base).infolist()]
    with zipfile.ZipFile(base, "w") as out:
        for info, data in entries:
            out.writestr(info, b'v1\n{"sstFiles": 5}' if info.filename == "metadata" else data)
    damage.fix_sidecar(base)


def _no_base(path: Path) -> None:
    for z in damage.zip_files(path, damage.lineage_of(path)):
        damage.remove(z)


CASES = {
    "INCOMPLETE_FORK": ("snapshots", False, lambda p: (p / FORK_STARTED).write_text('{"batch": 11}')),
    "QUERY_METADATA_MISSING": ("snapshots", False, lambda p: (p / "metadata").unlink()),
    "COMMIT_WITHOUT_OFFSETS": ("snapshots", False, lambda p: (p / "offsets" / "0").unlink()),
    "OFFSET_LOG_GAP": ("snapshots", False, lambda p: (p / "offsets" / "5").unlink()),
    "COMMIT_LOG_GAP": ("snapshots", False, lambda p: _commits(p, 5).unlink()),
    "MULTIPLE_UNFINISHED_BATCHES": ("killed_before_restart", False, lambda p: _copy_offsets(p, 3, 4)),
    # A join's second source: its log is `sources/1/` (Spark 4.3.0 failed to restart such a copy).
    "SOURCE_LOG_MISSING": ("join", False, lambda p: _source_entry(p, 1).unlink()),
    "PARTITION_COUNT_MISMATCH": (
        "snapshots", False, lambda p: _offsets_conf(p, 11, "spark.sql.shuffle.partitions", "8")
    ),
    "UNREADABLE_LOG_FILE": ("snapshots", False, lambda p: _commits(p, 3).write_text('v2\n{"nextBatch')),
    "UNKNOWN_FORMAT_VERSION": (
        "snapshots", False, lambda p: _commits(p, 3).write_text('v9\n{"nextBatchWatermarkMs":0}')
    ),
    "COMMITTED_FILE_MISSING": ("long_chain", False, lambda p: damage.remove(_committed(p))),
    "CHANGELOG_UNREADABLE": ("long_chain", False, lambda p: _truncate(_committed(p), 30)),
    # The committed version has its zip too: recovery loads the zip and never reads the changelog.
    "CHANGELOG_BESIDE_ZIP_DAMAGED": ("snapshots", False, lambda p: _truncate(_beside_the_zip(p), 5)),
    "LINEAGE_NOT_CONTIGUOUS": ("long_chain", False, lambda p: _drop_lineage(p, 10)),
    "LINEAGE_BAD_END": ("long_chain", False, lambda p: _drop_lineage(p, 31)),
    "REPLAY_CHAIN_BROKEN": ("long_chain", False, lambda p: damage.remove(_chain_changelog(p, 9))),
    "REPLAY_CHAIN_NO_BASE": ("watermark", False, _no_base),
    "LINEAGE_HEADER_NEAR_CAP": ("long_chain", False, lambda p: damage.pad_lineage(_committed(p), 56_000)),
    "ZIP_UNREADABLE": ("watermark", False, lambda p: _truncate(_base_zip(p), 100)),
    "ZIP_METADATA_INVALID": ("watermark", False, _rewrite_zip_metadata),
    "SST_MISSING": ("watermark", False, lambda p: _first_sst(p).unlink()),
    "SST_SIZE_MISMATCH": ("watermark", False, lambda p: _append(_first_sst(p), b"x")),
    "CRC_MISMATCH": ("watermark", True, lambda p: _break_sidecar(_chain_changelog(p, 0))),
    "CHANGELOG_CORRUPT": ("long_chain", True, lambda p: _corrupt(_chain_changelog(p, 9))),
    "MOVED_CHECKPOINT": ("list_state", False, lambda p: _name_another_root(p, "file:/somewhere/else")),
    "SCHEMA_FILE_MISSING": ("list_state", False, lambda p: _schema_file(p).unlink()),
    "UNKNOWN_PROVIDER": ("snapshots", False, lambda p: _pin_provider(p, "com.example.KvProvider")),
    # Checkpoints Spark writes by default (`testbed.defaults`): the HDFS-backed store.
    "SNAPSHOT_UNREADABLE": ("hdfs_agg", True, lambda p: _corrupt_lz4(_base_zip(p))),
    "DELTA_UNREADABLE": ("hdfs_agg", True, lambda p: _corrupt_lz4(_chain_changelog(p, 0))),
    # As a checkpoint last run before Spark 4.0 is: state, and no operator metadata naming it.
    "OPERATOR_METADATA_MISSING": ("hdfs_agg", False, lambda p: (p / "state/0/_metadata/metadata").unlink()),
    # The issue's reproduction: the metadata's count forged below the offsets' (cleanup took
    # partitions 1-3 for orphans); and a join's store left out of its metadata.
    "STORES_DISAGREE": ("hdfs_agg", False, lambda p: _declare_partitions(p, 1)),
    "UNNAMED_STATE_FOLDER": ("hdfs_agg", False, lambda p: shutil.copytree(p / "state/0/0", p / "state/0/7")),
    # A commit made a link to a copy of itself outside the checkpoint, and a FIFO in its place:
    # neither is read (tests/checkpoint/storage/test_untrusted_fs.py drives the actions over them).
    "FILE_OUTSIDE_CHECKPOINT": ("snapshots", False, lambda p: damage.link_outside(_commits(p, 3))),
    "NOT_A_REGULAR_FILE": ("snapshots", False, lambda p: damage.fifo_for(_commits(p, 3))),
    # A sidecar padded past anything Spark writes (4 KiB): reported from its listed size, never read.
    "FILE_OVER_ITS_BOUND": ("watermark", False, lambda p: _pad(Path(f"{_chain_changelog(p, 0)}.crc"), 5000)),
}  # fmt: skip


def _pad(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes().ljust(size, b" "))


def test_a_column_family_id_no_key_can_carry_is_invalid_zip_metadata(copy_of) -> None:
    """A family's id is its keys' 2-byte prefix, a Java short: 70,000 was accepted. So are ids that
    repeat, or pass `maxColumnFamilyId`; each is ZIP_METADATA_INVALID, an error every action heeds."""
    for edit in (lambda m: {**m, "columnFamilyMapping": {**m["columnFamilyMapping"], "x": 70_000}},
                 lambda m: {**m, "columnFamilyMapping": dict.fromkeys(m["columnFamilyMapping"], 1)},
                 lambda m: {**m, "maxColumnFamilyId": 0}):  # fmt: skip
        path = copy_of("list_state")
        base = _base_zip(path)
        entries = [(i, zipfile.ZipFile(base).read(i)) for i in zipfile.ZipFile(base).infolist()]
        with zipfile.ZipFile(base, "w") as out:
            for info, data in entries:
                if info.filename == "metadata":
                    head, body = data.decode().split("\n", 1)
                    data = (head + "\n" + json.dumps(edit(json.loads(body)))).encode()
                out.writestr(info, data)
        damage.fix_sidecar(base)
        assert codes(path).get("ZIP_METADATA_INVALID") == 1
        shutil.rmtree(path)


def _declare_partitions(path: Path, count: int) -> None:
    metadata = path / "state/0/_metadata/metadata"
    metadata.write_text(re.sub(r'"numPartitions":\d+', f'"numPartitions":{count}', metadata.read_text()))
    (metadata.parent / ".metadata.crc").unlink(missing_ok=True)


def _pin_provider(path: Path, provider_class: str) -> None:
    """Every offset file pins the provider (SPARK-21192): a query run with one of someone else's."""
    for batch in sorted(int(f.name) for f in (path / "offsets").iterdir() if f.name.isdigit()):
        _offsets_conf(path, batch, PROVIDER_CONF, provider_class)


def _corrupt_lz4(path: Path) -> None:
    """A byte of the first block's compressed data flipped: its checksum no longer matches."""
    damage.flip_last_byte_of_first_block(path)


def _schema_file(path: Path) -> Path:
    # Not its hidden Hadoop `.crc`, which a directory listing may give first: no metadata names it.
    return next(f for f in path.glob("state/*/_stateSchema/*/*") if not f.name.startswith("."))


def _name_another_root(path: Path, root: str) -> None:
    """Operator metadata v2 as a checkpoint written at `root` and then moved here has it."""
    from checkpoint.fork.plan import rewrite_schema_paths

    for meta in path.glob("state/*/_metadata/v2/[!.]*"):
        meta.write_bytes(rewrite_schema_paths(meta.read_bytes(), root, str(meta)))


def _corrupt(changelog: Path) -> None:
    damage.flip_last_byte_of_first_block(changelog)


def _drop_lineage(path: Path, version: int) -> None:
    damage.drop_lineage_versions(_committed(path), {version})


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def _append(path: Path, extra: bytes) -> None:
    path.write_bytes(path.read_bytes() + extra)


def _break_sidecar(main: Path) -> None:
    sidecar = main.with_name(main.name + ".crc")
    body = json.loads(sidecar.read_text())
    body["value"] += 1
    sidecar.write_text(json.dumps(body))


def test_every_code_has_a_case() -> None:
    # Dormancy is told by a clock, not by damage: tests/checkpoint/analysis/test_lifecycle.py.
    assert set(CASES) | {"LONG_REPLAY_CHAIN", "DORMANT", "STOPPED_MID_BATCH"} == set(CODES)


@pytest.mark.parametrize("code", sorted(CASES))
def test_damage_produces_exactly_its_finding(copy_of, defaults, tmp_path, code: str) -> None:
    scenario, deep, hurt = CASES[code]
    if scenario in defaults:
        path = tmp_path / scenario
        copy_checkpoint(defaults[scenario], path)
    else:
        path = copy_of(scenario)
    before = codes(path, deep)
    hurt(path)
    after = codes(path, deep)
    added = after - before
    assert set(added) == {code}, (added, before - after)
    # A store whose chain can no longer be computed loses its long-chain warning; nothing else goes.
    assert set(before - after) <= {"LONG_REPLAY_CHAIN"}
    v = validate(load_checkpoint(str(path), strict=False), ValidationOptions(deep=deep))
    severity = CODES[code].severity  # a partition folder nothing names is kept, and warned of
    assert v.ok == (severity == Severity.WARNING) and all(
        f.severity == severity for f in v.findings if f.code == code
    )
    assert all(str(path) in f.path for f in v.findings)


def test_a_changelog_recovery_does_not_read_is_named_and_does_not_block(
    spark, copy_of, corpus, corpus_root, tmp_path
) -> None:
    """The committed version's changelog damaged where its zip is whole: Spark loads the zip alone
    (4.0.5, 4.1.4, 4.2.1 and 4.3.0 restarted a truncated one as they restarted an untouched copy).
    So its finding warns, once, on the changelog, not the zip; a fork copies the zip alone and
    compaction plans; a long header there is no finding. A format this release does not know, or a
    file the door refuses to open, blocks."""
    from checkpoint.compaction import CompactionPlanOptions, plan_compaction
    from checkpoint.model import load_head
    from checkpoint.storage import Storage
    from testbed.corpus import scenario_named
    from tests.support.forking import fork
    from tests.support.state import restart_like_untouched

    def findings(path: Path) -> list[tuple[str, Severity, str]]:
        v = validate(load_checkpoint(str(path), strict=False), ValidationOptions(deep=True))
        assert v.ok == all(f.severity != Severity.ERROR for f in v.findings)
        return [(f.code, f.severity, f.path) for f in v.findings]

    hurts = {
        "truncated": lambda c: _truncate(c, 5),
        "ends_wrong": lambda c: damage.drop_lineage_versions(c, {int(c.name.split("_")[0]) - 1}),
        "near_cap": lambda c: damage.pad_lineage(c, 56_000),
    }
    for name, hurt in hurts.items():
        path = copy_checkpoint(corpus["snapshots"], tmp_path / name)
        changelog = _beside_the_zip(path)
        hurt(changelog)
        damage.fix_sidecar(changelog)
        warned = (
            [] if name == "near_cap" else [("CHANGELOG_BESIDE_ZIP_DAMAGED", Severity.WARNING, str(changelog))]
        )
        assert findings(path) == warned, name
    path = tmp_path / "truncated"
    v = validate(load_checkpoint(str(path), strict=False))
    assert v.ok and all(e.loadable and e.problem is None for e in v.lineage)
    plan_compaction(
        load_head(str(path)), CompactionPlanOptions(min_chain=1, quiet_seconds=0)
    )  # refuses on an error
    forked = fork(Storage(str(path)), Storage(str(tmp_path / "forked")))
    assert forked.files > 0 and not (tmp_path / "forked" / _beside_the_zip(path).relative_to(path)).exists()
    assert findings(tmp_path / "forked") == []

    unknown = copy_checkpoint(corpus["snapshots"], tmp_path / "unknown")
    damage.rewrite_version(_beside_the_zip(unknown), "v7")
    v = validate(load_checkpoint(str(unknown), strict=False))
    assert [(f.code, f.path) for f in v.findings] == [
        ("UNKNOWN_FORMAT_VERSION", str(_beside_the_zip(unknown)))
    ]
    assert not v.ok and not all(e.loadable for e in v.lineage)
    # Nor does a file the door will not open (here a FIFO, read head-first as `ckpt validate` reads).
    fifo = copy_checkpoint(corpus["snapshots"], tmp_path / "fifo")
    damage.fifo_for(_beside_the_zip(fifo))
    v = validate(load_head(str(fifo), strict=False))
    assert [(f.code, f.severity) for f in v.findings] == [("NOT_A_REGULAR_FILE", Severity.ERROR)]
    assert not v.ok and not all(e.loadable for e in v.lineage)

    untouched = copy_checkpoint(corpus["snapshots"], tmp_path / "untouched")
    restart_like_untouched(
        spark, scenario_named("snapshots"), corpus_root / "snapshots", path, untouched, tmp_path / "more"
    )


def test_a_checkpoint_without_its_metadata_is_found_in_a_fleet_and_blocks(corpus, tmp_path) -> None:
    """Its logs there and its `metadata` gone (Spark 4.3.0 refused to restart such a copy; 4.0.5
    and 4.1.4 restarted it under a new query id): discovery finds it, so the fleet view's row says
    so, where it used to be skipped as no checkpoint. An interrupted fork, which has no `metadata`
    yet, is INCOMPLETE_FORK alone."""
    from checkpoint.analysis.fleet import look_at
    from checkpoint.model import find_checkpoints
    from checkpoint.policy import POLICY
    from checkpoint.storage import Storage

    root = tmp_path / "root"
    for name in ("gone", "whole"):
        copy_checkpoint(corpus["snapshots"], root / name)
    (root / "gone" / "metadata").unlink()
    found = {f.rel: f for f in find_checkpoints(Storage(str(root)))}
    assert sorted(found) == ["gone", "whole"]
    rows = {rel: look_at(rel, f.url, None, POLICY, {}) for rel, f in found.items()}
    assert rows["gone"].errors == ("QUERY_METADATA_MISSING",) and rows["whole"].errors == ()

    forking = root / "gone"
    (forking / FORK_STARTED).write_text('{"batch": 11}')
    assert set(codes(forking)) == {"INCOMPLETE_FORK"}


def _lines_of_every_offsets_file(path: Path, change) -> None:
    for f in (path / "offsets").iterdir():
        if f.name.isdigit():
            f.write_text("\n".join(change(f.read_text().split("\n"))))


def test_a_file_sources_log_is_checked_as_a_restart_reads_it(corpus, tmp_path) -> None:
    """Each damage Spark 4.3.0 was restarted on (docs/format.md, section 10): it failed without the
    entry the newest offsets name ("batch 31 doesn't exist"), without one between the newest
    compaction and it, without that compaction, without an older compaction (the two newest tell
    the interval: "19.compact doesn't exist (latestId: 31, compactInterval: 20)"), and with an
    empty entry ("Incomplete log file"); it restarted as an untouched copy without an entry below
    the compaction, or without the oldest compaction. A fleet's look says what validation of the
    whole listing says. A query that reads its source twice (a self-union) writes two lines and
    one folder: never taken for damage, and still checked."""
    from checkpoint.analysis.fleet import look_at
    from checkpoint.policy import POLICY

    log = corpus["long_chain"] / "sources" / "0"
    newest = int(_source_entry(corpus["long_chain"]).name)
    compactions = sorted(int(p.name.split(".")[0]) for p in log.glob("*.compact"))
    assert len(compactions) >= 3 and compactions[-1] < newest, (
        "the corpus' long chain compacts its source log"
    )
    last = compactions[-1]

    def gone(name: str):
        return lambda p: (p / "sources" / "0" / name).unlink()

    def twice(lines: list[str]) -> list[str]:
        return [*lines[:3], lines[2], *lines[3:]]

    cases = {
        "newest": ("long_chain", gone(str(newest)), True),
        "after-compaction": ("long_chain", gone(str(last + 1)), True),
        "compaction": ("long_chain", gone(f"{last}.compact"), True),
        "older-compaction": ("long_chain", gone(f"{compactions[-2]}.compact"), True),
        "empty": ("long_chain", lambda p: (p / "sources" / "0" / str(newest - 1)).write_bytes(b""), True),
        "below-compaction": ("long_chain", gone(str(last - 1)), False),
        "oldest-compaction": ("long_chain", gone(f"{compactions[0]}.compact"), False),
        "self-union": ("dedup_agg", lambda p: _lines_of_every_offsets_file(p, twice), False),
        "self-union-damaged": (
            "dedup_agg",
            lambda p: (_lines_of_every_offsets_file(p, twice), _source_entry(p).unlink()),
            True,
        ),
    }
    for name, (scenario, hurt, broken) in cases.items():
        path = tmp_path / name
        copy_checkpoint(corpus[scenario], path)
        hurt(path)
        expected = ("SOURCE_LOG_MISSING",) if broken else ()
        errors = tuple(c for c in codes(path) if CODES[c].severity == Severity.ERROR)
        assert errors == expected, name
        assert look_at(name, str(path), None, POLICY, {}).errors == expected, name


def _replace_with_a_file(folder: Path) -> None:
    shutil.rmtree(folder)
    folder.write_text("not a log")


def _loop(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.symlink_to(path.name)


def _offset_line(path: Path, source: int, line: str) -> None:
    target = max((p for p in (path / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    lines = target.read_text().split("\n")
    lines[2 + source] = line
    target.write_text("\n".join(lines))


@pytest.mark.parametrize(
    ("hurt", "expected"),
    [
        # Refused, so as absent: the offsets' second line may be a second read of the first source.
        (lambda p: damage.link_outside(_source_entry(p, 1).parent), {"FILE_OUTSIDE_CHECKPOINT"}),
        (lambda p: _replace_with_a_file(_source_entry(p, 1).parent), {"SOURCE_LOG_MISSING"}),
        (lambda p: _loop(_source_entry(p, 1).parent), {"SOURCE_LOG_MISSING"}),  # a name, not a folder
        (lambda p: _loop(_source_entry(p, 1)), {"SOURCE_LOG_MISSING"}),  # a link to itself: no bytes
        (
            lambda p: damage.link_outside(_source_entry(p, 1)),
            {"FILE_OUTSIDE_CHECKPOINT", "SOURCE_LOG_MISSING"},
        ),
        (lambda p: damage.fifo_for(_source_entry(p, 1)), {"NOT_A_REGULAR_FILE", "SOURCE_LOG_MISSING"}),
        (lambda p: _offset_line(p, 1, '{"logOffset":99999999999999999}'), {"SOURCE_LOG_MISSING"}),
        (lambda p: _offset_line(p, 1, '{"logOffset":-3}'), {"UNREADABLE_LOG_FILE"}),
        (lambda p: _offset_line(p, 1, '{"logOffset":{"0":5}}'), set()),  # Kafka's topic called logOffset
    ],
    ids=[
        "folder-linked-out",
        "folder-a-file",
        "folder-a-loop",
        "entry-a-loop",
        "entry-linked-out",
        "entry-a-fifo",
        "offset-absurd",
        "offset-negative",
        "kafka",
    ],
)
def test_a_hostile_source_log_is_said_alike_by_a_look_and_never_read(copy_of, hurt, expected) -> None:
    from checkpoint.model import Logs, load_head

    path = copy_of("join")
    hurt(path)
    assert {c for c in codes(path) if CODES[c].severity == Severity.ERROR} == expected
    for logs in Logs:
        look = validate(load_head(str(path), strict=False, logs=logs))
        assert {f.code for f in look.findings if f.severity == Severity.ERROR} == expected, logs


def test_an_offsets_file_of_many_source_lines_costs_a_listing_per_source_folder(copy_of) -> None:
    """A damaged newest offsets file naming 20,000 sources: the look lists `sources/` and the one
    folder there, whatever the lines, and what it says stays short."""
    from checkpoint.model import Logs, load_head
    from checkpoint.storage import Storage

    path = copy_of("watermark")
    line = _source_entry(path).name
    _offset_line(path, 0, "\n".join([f'{{"logOffset":{line}}}'] * 20_000))
    storage = Storage(str(path))
    look = validate(load_head(storage, strict=False, logs=Logs.RECOVERY))
    listings = storage.calls.snapshot()["list_dir"]
    assert listings < 20, listings
    assert [f.code for f in look.findings if f.severity == Severity.ERROR] == []
    (path / "sources" / "0" / line).unlink()
    look = validate(load_head(str(path), strict=False, logs=Logs.RECOVERY))
    # Its folder's finding, and one for every line whose folder is not known: its first five named.
    errors = [f for f in look.findings if f.severity == Severity.ERROR]
    assert {f.code for f in errors} == {"SOURCE_LOG_MISSING"} and len(errors) == 2
    assert all(len(f.message) < 1000 for f in errors) and "and 19994 more" in errors[1].message


def test_a_long_header_beside_the_versions_own_zip_leaves_the_fleets_headroom_alone(copy_of) -> None:
    """Loading the version's own zip starts the lineage again: the header there is no finding, and
    the fleet view's headroom does not count it (it asked for a compaction that plans nothing)."""
    from checkpoint.analysis.fleet import fleet_row
    from checkpoint.model import load_head

    path = copy_of("snapshots")
    damage.pad_lineage(_beside_the_zip(path), 56_000)
    assert "LINEAGE_HEADER_NEAR_CAP" not in codes(path)
    assert fleet_row("k", load_head(str(path), strict=False)).max_lineage_header_fraction < 0.5


@pytest.mark.parametrize("name", ["format_v1", "long_chain"])
def test_an_empty_changelog_of_the_chain_is_found_without_deep_and_refused_before_a_fork(
    spark, copy_of, corpus_root, tmp_path, name: str
) -> None:
    """Spark fails to load a store on an empty changelog (an EOFException) in either format. The
    listing tells it: the shallow check reports it once (and `deep` once too, its stale sidecar
    unread), and a fork refuses before it writes a byte. It used to copy it and end incomplete, or,
    where a sidecar matched the empty file, end complete with a chain Spark cannot load."""
    from checkpoint.fork import ForkRefused
    from checkpoint.model import checkpoint_lineage
    from checkpoint.storage import Storage
    from testbed.restart import restart
    from tests.support.forking import fork

    path = copy_of(name)
    chains = [e for e in checkpoint_lineage(load_checkpoint(str(path))) if e.chain]
    if not chains:  # every store loads its own snapshot (Spark's maintenance picks when it writes)
        for z in (path / "state/0/0").glob("*.zip"):
            damage.remove(z)  # its store then replays every changelog from version 1
        chains = [damage.lineage_of(path)]
    empty = path / chains[0].chain[0].rel
    _truncate(empty, 0)  # its sidecar (format V2) left as it was: one damage, one finding
    for deep in (False, True):
        v = validate(load_checkpoint(str(path), strict=False), ValidationOptions(deep=deep))
        assert [(f.code, f.path) for f in v.findings if f.severity == Severity.ERROR] == [
            ("CHANGELOG_CORRUPT", str(empty))
        ]
    with pytest.raises(ForkRefused, match="CHANGELOG_CORRUPT"):
        fork(Storage(str(path)), Storage(str(tmp_path / "forked")))
    assert not (tmp_path / "forked").exists()
    with pytest.raises(Exception, match="CANNOT_LOAD_STATE_STORE"):
        restart(spark, name, corpus_root / name, path, tmp_path / "more", read_state=False)


def test_deep_checks_need_deep_mode(copy_of) -> None:
    path = copy_of("long_chain")
    _corrupt(_chain_changelog(path, 9))
    assert "CHANGELOG_CORRUPT" not in codes(path, deep=False)
    assert "CHANGELOG_CORRUPT" in codes(path, deep=True)


def test_long_chain_threshold(corpus) -> None:
    path = corpus["killed_after_restart"]  # replay chains of 6
    assert codes(path)["LONG_REPLAY_CHAIN"] == 0
    assert codes(path, long_chain_threshold=6)["LONG_REPLAY_CHAIN"] == 4
    assert codes(corpus["long_chain"])["LONG_REPLAY_CHAIN"] == 4


def test_header_just_below_the_threshold_is_not_a_finding(copy_of) -> None:
    path = copy_of("long_chain")
    damage.pad_lineage(_committed(path), int(65_535 * 0.8) - 1)
    assert "LINEAGE_HEADER_NEAR_CAP" not in codes(path)
    assert damage.lineage_of(path).lineage_header_bytes == int(65_535 * 0.8) - 1


def test_an_unknown_changelog_version_is_a_lineage_finding(copy_of) -> None:
    from checkpoint.analysis.checks import Category

    path = copy_of("long_chain")
    target = _committed(path)
    damage.rewrite_version(target, "v7")
    v = validate(load_checkpoint(str(path), strict=False))
    (finding,) = [f for f in v.findings if f.code == "UNKNOWN_FORMAT_VERSION"]
    assert finding.category == Category.LINEAGE and finding.path == str(target) and "'v7'" in finding.message
    logs_only = ValidationOptions(categories=frozenset({Category.COMMIT_LOG}))
    assert validate(load_checkpoint(str(path), strict=False), logs_only).ok


def test_deep_validation_streams_each_file(copy_of, monkeypatch) -> None:
    """Chain files are read a chunk at a time, the CRC32C taken on the way, never whole: a corrupt
    changelog and a stale sidecar are still found."""
    from checkpoint.storage import Storage

    path = copy_of("long_chain")
    _corrupt(_chain_changelog(path, 3))  # a block checksum fails
    sidecar = Path(f"{_chain_changelog(path, 5)}.crc")
    sidecar.write_text(sidecar.read_text().replace('"value":', '"value":1', 1))  # another CRC
    whole: list[str] = []
    real = Storage.read_bytes

    def read_bytes(self, rel, *, limit):
        if rel.endswith((".changelog", ".zip")):
            whole.append(rel)
        return real(self, rel, limit=limit)

    monkeypatch.setattr(Storage, "read_bytes", read_bytes)
    found = codes(path, deep=True)
    assert found["CHANGELOG_CORRUPT"] == 1 and found["CRC_MISMATCH"] == 1
    assert whole == []
