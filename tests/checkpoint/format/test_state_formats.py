"""The state formats (`checkpoint.format.states`): chosen from what a checkpoint's logs say, and
the answers the actions ask of them."""

from __future__ import annotations

import re

import pytest

from checkpoint.errors import (
    CompactionRefused,
    GcError,
    MigrationRefused,
    PurgeRefused,
    RebuildError,
    Refused,
    RepartitionRefused,
)
from checkpoint.format import ByEngine, ByRecovery, states
from checkpoint.format.layout import FileKind, classify
from checkpoint.format.providers import Provider
from checkpoint.format.spark import HDFS_PROVIDER, ROCKSDB_PROVIDER


@pytest.mark.parametrize(
    ("provider_class", "version", "expected"),
    [
        (HDFS_PROVIDER, 1, states.HDFS),
        (ROCKSDB_PROVIDER, 1, states.ROCKSDB_V1),
        (ROCKSDB_PROVIDER, 2, states.ROCKSDB_V2),
        # No pin: written before Spark pinned the provider, under its default; V2 is RocksDB's only.
        (None, 1, states.HDFS),
        (None, 2, states.ROCKSDB_V2),
    ],
)
def test_a_format_is_chosen_from_the_pinned_provider_and_the_version(provider_class, version, expected):
    assert states.state_format_of(provider_class, version) is expected


@pytest.mark.parametrize(
    ("provider_class", "version"),
    [("com.example.MyStateStoreProvider", 1), ("com.example.MyStateStoreProvider", 2), (HDFS_PROVIDER, 2)],
)
def test_what_spark_does_not_write_is_foreign_and_changed_by_nothing(provider_class, version) -> None:
    """A provider of someone else's, or a pair Spark never writes (the HDFS-backed store refuses
    checkpoint ids): every action refuses it, with its own error, naming the class; nothing that
    depends on how its state is held runs on it."""
    got = states.state_format_of(provider_class, version)
    assert got.version == version
    assert got.name == f"{Provider.of_class(provider_class).value} V{version}"
    for action in states.Action:
        assert f"the state store provider {provider_class} is not Spark's" in (got.refusal(action) or "")
    with pytest.raises(GcError, match="its files are not ours to delete"):
        got.refuse(states.Action.CLEANUP, "here")
    with pytest.raises(Refused, match="neither read nor changed"):
        got.engine.of(ByEngine(hdfs=1, rocksdb=2))
    # Its names are still found as its version's are (the logs are Spark's).
    assert got.recovery.of(ByRecovery(listed="listed", named="named")) == (
        "named" if version == 2 else "listed"
    )


U = "0b6a4d4e-8b1c-4d9e-9a0f-1c2d3e4f5a6b"
# One real name of each kind a state folder holds, as the corpus's queries write them.
NAMES = {
    "v1 zip": "state/0/0/12.zip",
    "v2 zip": f"state/0/0/12_{U}.zip",
    "v1 changelog": "state/0/0/12.changelog",
    "v2 changelog": f"state/0/0/12_{U}.changelog",
    "delta": "state/0/0/12.delta",
    "snapshot": "state/0/0/12.snapshot",
    "spark temp": f"state/0/0/.12.delta.{U}.tmp",
    "sst": f"state/0/0/SSTs/000008-{U}.sst",
}


def _answers(f: states.StateFormat) -> dict:
    """What a format answers, asked as the model and the actions ask it."""
    return {
        "recovery": f.recovery.of(ByRecovery(listed="listed", named="named")),
        "engine": f.engine.of(ByEngine(hdfs="hdfs", rocksdb="rocksdb")),
        "its names": sorted(k for k, rel in NAMES.items() if f.recognises(classify(rel))),
        "sidecar": f.sidecar_of("state/0/0/12.zip"),
        "fork proves a copy by": f.fork_decode(FileKind.ZIP) or "sidecar",
        "writer read": f.writer(lambda: "read"),
        "refused": sorted(a.value for a in states.Action if f.refusal(a)),
    }


def test_each_format_answers_for_itself() -> None:
    got = {f.name: _answers(f) for f in states.KNOWN.values()}
    v1_names = ["delta", "snapshot", "spark temp", "sst", "v1 changelog", "v1 zip"]
    assert got == {
        "hdfs V1": {
            "recovery": "listed", "engine": "hdfs", "its names": v1_names, "sidecar": None,
            "fork proves a copy by": FileKind.ZIP, "writer read": None,
            "refused": ["compact beside a running query", "purge expired state", "rebuild in RocksDB",
                        "repartition"],
        },
        "rocksdb V1": {
            "recovery": "listed", "engine": "rocksdb", "its names": v1_names, "sidecar": None,
            "fork proves a copy by": FileKind.ZIP, "writer read": None,
            "refused": ["compact beside a running query", "snapshot by Spark's provider"],
        },
        "rocksdb V2": {
            "recovery": "named", "engine": "rocksdb", "its names": ["sst", "v2 changelog", "v2 zip"],
            "sidecar": "state/0/0/12.zip.crc", "fork proves a copy by": "sidecar", "writer read": "read",
            "refused": ["migrate to RocksDB V2", "snapshot by Spark's provider"],
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "action", "error", "says"),
    [
        (states.HDFS, states.Action.REPARTITION, RepartitionRefused, "UNSUPPORTED_PROVIDER"),
        (states.HDFS, states.Action.REBUILD, RebuildError, "0/1/default: not a RocksDB store (hdfs V1)"),
        (states.ROCKSDB_V2, states.Action.MIGRATE, MigrationRefused, "`ckpt fork` relocates it"),
        (states.ROCKSDB_V1, states.Action.COMPACT_LIVE, CompactionRefused, "carry no attempt id"),
        (states.HDFS, states.Action.PURGE, PurgeRefused, "keeps no TTL state"),
    ],
)
def test_one_gate_raises_each_actions_own_refusal(fmt, action, error, says) -> None:
    with pytest.raises(error, match=re.escape(says)):
        fmt.refuse(action, "file:///ckpt", "0/1/default")
    # What a format allows passes the gate.
    states.ROCKSDB_V1.refuse(states.Action.MIGRATE, "file:///ckpt")


def test_a_fourth_format_is_one_type() -> None:
    """A format that differs in one answer is one subclass overriding it: every question the
    rest of the code asks is answered, by the base where it does not differ."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Sealed(states.StateFormat):
        def refusal(self, action: states.Action) -> str | None:
            return "sealed"

    sealed = Sealed(Provider.ROCKSDB, 3, states.ROCKSDB_V1.files)
    answers = _answers(sealed)
    assert answers["refused"] == sorted(a.value for a in states.Action)
    assert answers["recovery"] == "listed" and answers["engine"] == "rocksdb"


def _logs(root, batches: dict[int, tuple[str | None, bool]]) -> None:
    """Offset and commit files as Spark writes them: per batch, the provider its offset pins (None:
    no pin) and whether its commit is format V2's (`v2`, with ids)."""
    import json

    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, (provider, v2) in batches.items():
        conf = {} if provider is None else {"spark.sql.streaming.stateStore.providerClass": provider}
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": conf}
        (root / "offsets" / str(batch)).write_text(f'v1\n{json.dumps(meta)}\n{{"logOffset":{batch}}}')
        ids = {"stateUniqueIds": {"0": [[f"00000000-0000-0000-0000-{batch:012d}"]]}} if v2 else {}
        commit = {"nextBatchWatermarkMs": 0, **ids}
        (root / "commits" / str(batch)).write_text(f"{'v2' if v2 else 'v1'}\n{json.dumps(commit)}")


def test_a_migrated_checkpoint_has_its_format_per_batch(tmp_path) -> None:
    """`ckpt migrate`'s copy keeps the source's logs up to the migration batch: those batches are
    in the source's format and are history; the checkpoint's own format is its head's."""
    from checkpoint.model import load_checkpoint, maintained_batches

    _logs(tmp_path, {0: (HDFS_PROVIDER, False), 1: (None, False), 2: (ROCKSDB_PROVIDER, True),
                     3: (None, True)})  # fmt: skip
    ckpt = load_checkpoint(str(tmp_path), strict=False)
    assert ckpt.states is states.ROCKSDB_V2
    hdfs, v2 = states.HDFS, states.ROCKSDB_V2
    assert [ckpt.states_at(b) for b in range(4)] == [hdfs, hdfs, v2, v2]
    assert maintained_batches(ckpt) == [2, 3]


def test_a_provider_that_differs_alone_makes_no_history(tmp_path) -> None:
    """An older offset that pins another provider under V2 commits is no format Spark writes: that
    batch is foreign, and still maintained, since calling it history would let cleanup keep less."""
    from checkpoint.model import load_checkpoint, maintained_batches

    _logs(tmp_path, {0: (HDFS_PROVIDER, True), 1: (ROCKSDB_PROVIDER, True)})
    ckpt = load_checkpoint(str(tmp_path), strict=False)
    assert ckpt.states_at(0).refusal(states.Action.CLEANUP) and ckpt.states_at(1) is states.ROCKSDB_V2
    assert maintained_batches(ckpt) == [0, 1]


@pytest.mark.unit
def test_a_format_holds_a_batchs_state_only_when_provider_and_version_agree() -> None:
    """What a fork asks (`holds_state_of`: the files to copy are the batch's) against what lineage
    asks (`reads_state_of`: the names recovery reads): an HDFS batch under RocksDB V1 is read by
    name alone, and its state files are not RocksDB's."""
    formats = [states.HDFS, states.ROCKSDB_V1, states.ROCKSDB_V2]
    assert [[head.holds_state_of(b) for b in formats] for head in formats] == [
        [True, False, False],
        [False, True, False],
        [False, False, True],
    ]
    assert [[head.reads_state_of(b) for b in formats] for head in formats] == [
        [True, True, False],
        [True, True, False],
        [False, False, True],
    ]


@pytest.mark.unit
def test_a_kind_sent_to_a_spark_task_is_the_same_kind() -> None:
    """A checkpoint goes to Spark's tasks pickled: its format's kinds come back as the one of each."""
    import pickle

    from checkpoint.format.states.kinds import LISTED, NAMED, ROCKSDB_INSTANCES, UNSAFE_ROW_MAPS

    for kind in (LISTED, NAMED, UNSAFE_ROW_MAPS, ROCKSDB_INSTANCES):
        assert pickle.loads(pickle.dumps(kind)) is kind
    for fmt in (*states.KNOWN.values(), states.state_format_of("com.example.P", 2)):
        back = pickle.loads(pickle.dumps(fmt))
        assert (back, back.recovery, type(back.engine)) == (fmt, fmt.recovery, type(fmt.engine))
