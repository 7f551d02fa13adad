"""The format core against every checkpoint the corpus's real queries wrote (no Spark needed)."""

from __future__ import annotations

from collections import Counter

import pytest

from checkpoint.format.changelog import column_family_id
from checkpoint.format.layout import FileKind
from checkpoint.model import reading
from checkpoint.model.checkpoint import Checkpoint, StoreId
from testbed.corpus import LONG_CHAIN_BATCHES
from testbed.sinks import KILLED_AT_BATCH, RETRY_BATCHES

V2 = [
    "long_chain", "snapshots", "watermark", "retention", "killed_before_restart", "killed_after_restart",
    "task_retry", "two_actions", "dedup_agg", "join", "join_cf", "list_state", "zstd",
]  # fmt: skip


def changelogs(ckpt: Checkpoint):
    return [f for f in ckpt.files if f.kind == FileKind.CHANGELOG]


def test_corpus_has_every_scenario(corpus) -> None:
    assert sorted(corpus) == sorted(V2 + ["format_v1"])


def test_every_file_is_classified(loaded) -> None:
    for name, ckpt in loaded.items():
        unknown = [f.rel for f in ckpt.files if f.kind == FileKind.UNKNOWN]
        assert unknown == [], name
        kinds = ckpt.count_by_kind()
        for required in (
            "query_metadata",
            "offset",
            "commit",
            "source_log",
            "operator_metadata",
            "changelog",
        ):
            assert kinds.get(required, 0) > 0, (name, required)


def test_format_versions(loaded) -> None:
    assert loaded["format_v1"].format_version == 1
    assert {f.what.unique_id for f in changelogs(loaded["format_v1"])} == {None}
    for name in V2:
        assert loaded[name].format_version == 2, name
        assert all(f.what.unique_id for f in changelogs(loaded[name])), name


@pytest.mark.parametrize("name", V2)
def test_every_committed_id_has_its_changelog(loaded, name: str) -> None:
    """Or Spark pruned it: its maintenance cleans each store from that store's own snapshots
    (keeping versions >= newest zip - minBatchesToRetain + 1), while the commit log keeps
    minBatchesToRetain + 1 batches. So `commits/N` can outlive version N+1's files on some
    partitions; what is gone is always a prefix below a surviving snapshot.
    """
    ckpt = loaded[name]
    checked = pruned = 0
    for batch in ckpt.batches.values():
        if not batch.committed:
            continue
        for sid, store in ckpt.stores.items():
            uid = ckpt.committed_unique_id(batch.id, sid)
            assert uid is not None, (batch.id, sid)
            if store.file(FileKind.CHANGELOG, batch.id + 1, uid) is None:
                oldest = min(store.by_version)
                assert name == "retention" and batch.id + 1 < oldest, (batch.id, sid, uid)
                assert any(f.kind == FileKind.ZIP for fs in store.by_version[oldest].values() for f in fs)
                assert batch.id < ckpt.latest_committed_batch
                pruned += 1
            checked += 1
    assert checked > pruned and checked >= len(ckpt.stores)


@pytest.mark.parametrize("name", V2)
def test_lineage_is_contiguous_and_ends_at_version_minus_one(loaded, name: str) -> None:
    ckpt = loaded[name]
    for f in changelogs(ckpt):
        header = ckpt.read_changelog_header(f)
        assert header.format_version in (3, 4), f.rel
        versions = [e.version for e in header.lineage]
        v = f.what.version
        if v == 1:
            assert versions == [], f.rel
        elif versions == []:
            # Seen on a real checkpoint (two_actions, foreachBatch's second action, an uncommitted
            # attempt), against docs/format.md §3: an empty lineage above version 1, beside
            # the attempt's own zip of that version, which is what a load of it reads.
            own = StoreId(f.what.operator, f.what.partition, f.what.store)
            assert ckpt.stores[own].file(FileKind.ZIP, v, f.what.unique_id) is not None, f.rel
        else:
            assert versions == list(range(versions[0], v)), f.rel
            assert versions[0] >= 1


@pytest.mark.parametrize("first_read", [40, 32 * 1024])
def test_headers_read_together_are_the_headers_read_one_by_one(loaded, monkeypatch, first_read) -> None:
    """Cleanup reads a partition's lineage headers together: the first block of each in one go,
    reading on from there where a header runs past it (with 40 bytes, nearly every header does;
    with the 32 KiB of a real plan, none of the corpus's). Each header is the one a read of its own
    gives."""
    monkeypatch.setattr(reading, "_HEADER_PREFETCH", first_read)
    for name in V2:
        ckpt = loaded[name]
        files = changelogs(ckpt)
        before = ckpt.storage.calls.snapshot()
        together = list(ckpt.read_changelog_headers(files))
        calls = ckpt.storage.calls.snapshot() - before
        assert [f for f, _ in together] == files, name
        assert [h for _, h in together] == [ckpt.read_changelog_header(f) for f in files], name
        assert calls["read"] == len(files) and set(calls) <= {"read", "open"}, name
        longer = sum(1 for f in files if f.info.size > first_read)  # the most that can be read on
        assert (0 < calls["open"] <= longer) if first_read == 40 else (calls["open"] == 0), name


def test_long_chain_is_delta_only(loaded) -> None:
    ckpt = loaded["long_chain"]
    assert ckpt.latest_committed_batch == LONG_CHAIN_BATCHES - 1
    assert ckpt.count_by_kind().get("zip", 0) == 0
    for sid in ckpt.stores:
        uid = ckpt.committed_unique_id(LONG_CHAIN_BATCHES - 1, sid)
        head = ckpt.read_changelog_header(ckpt.stores[sid].file(FileKind.CHANGELOG, LONG_CHAIN_BATCHES, uid))
        assert [e.version for e in head.lineage] == list(range(1, LONG_CHAIN_BATCHES))
        assert head.header_bytes > 60 * (LONG_CHAIN_BATCHES - 1)


def test_snapshots_list_their_ssts_with_sizes(loaded) -> None:
    for name in ("snapshots", "dedup_agg", "join", "join_cf", "list_state"):
        ckpt = loaded[name]
        zips = [f for f in ckpt.files if f.kind == FileKind.ZIP]
        assert zips, name
        for z in zips:
            snap = ckpt.read_snapshot(z)
            names = [n for n, _ in snap.entries]
            assert names[-1] == "metadata" and "CURRENT" in names, z.rel
            assert any(n.startswith("OPTIONS-") for n in names) and any(
                n.startswith("MANIFEST-") for n in names
            )
            ssts = {f.rel.rsplit("/", 1)[1]: f.info.size for f in ckpt.stores[_sid(z)].ssts}
            for ref in snap.metadata.sst_files:
                assert ssts.get(ref.dfs_name) == ref.size, (z.rel, ref)


def _sid(f) -> StoreId:
    return StoreId(f.what.operator, f.what.partition, f.what.store)


def test_spark_sidecars_match_their_files(loaded) -> None:
    checked = 0
    for name in V2:
        ckpt = loaded[name]
        for crc in (f for f in ckpt.files if f.kind == FileKind.SPARK_CRC):
            assert ckpt.sidecar_matches(crc), crc.rel
            checked += 1
    assert checked > 500


def test_killed_mid_batch(loaded, manifest) -> None:
    assert manifest["scenarios"]["killed"]["killed_at_batch"] == KILLED_AT_BATCH
    before, after = loaded["killed_before_restart"], loaded["killed_after_restart"]
    assert before.latest_planned_batch == KILLED_AT_BATCH
    assert before.latest_committed_batch == KILLED_AT_BATCH - 1
    lost = {sid: set(s.by_version.get(KILLED_AT_BATCH + 1, {})) for sid, s in before.stores.items()}
    assert all(len(ids) == 1 for ids in lost.values()), lost  # the lost attempt wrote every store
    for sid, store in after.stores.items():
        ids = set(store.by_version[KILLED_AT_BATCH + 1])
        committed = after.committed_unique_id(KILLED_AT_BATCH, sid)
        assert lost[sid] < ids and committed in ids - lost[sid]
    assert after.latest_committed_batch > KILLED_AT_BATCH


def test_several_ids_per_version(loaded) -> None:
    retry = loaded["task_retry"]
    for batch in RETRY_BATCHES:
        sid = StoreId(0, 0, "default")
        ids = set(retry.stores[sid].by_version[batch + 1])
        assert len(ids) == 2 and retry.committed_unique_id(batch, sid) in ids
    two = loaded["two_actions"]
    for sid, store in two.stores.items():
        for version, ids in store.by_version.items():
            assert len(ids) == 2, (sid, version)
            assert two.committed_unique_id(version - 1, sid) in ids


def test_retention_pruned_old_batches_and_files(loaded) -> None:
    ckpt = loaded["retention"]
    assert min(b.id for b in ckpt.batches.values()) > 0
    assert min(f.what.version for f in changelogs(ckpt)) > 1


def test_operators_and_stores(loaded) -> None:
    dedup = loaded["dedup_agg"]
    assert [(o.id, o.name) for o in dedup.operators.values()] == [(0, "stateStoreSave"), (1, "dedupe")]
    join = loaded["join"]
    stores = (
        "left-keyToNumValues",
        "left-keyWithIndexToValue",
        "right-keyToNumValues",
        "right-keyWithIndexToValue",
    )
    assert join.operators[0].store_names == stores
    assert len(join.stores) == 4 * 4
    assert {sid.store for sid in join.stores} == set(stores)
    # Join state format 3 keeps one store whose column families carry the four join stores.
    assert loaded["join_cf"].operators[0].store_names == ("default",)


@pytest.mark.parametrize("name", ["list_state", "join_cf"])
def test_column_family_changelogs(loaded, name: str) -> None:
    ckpt = loaded[name]
    ops, families = Counter(), set()
    for f in changelogs(ckpt):
        header, records = ckpt.read_changelog(f)
        assert header.format_version == 4
        ops.update(r.op for r in records)
        families |= {column_family_id(r.key) for r in records}
    mapping = ckpt.read_snapshot(
        next(f for f in ckpt.files if f.kind == FileKind.ZIP)
    ).metadata.column_family_mapping
    assert families <= set(mapping.values())
    assert ops["put"] > 0
    if name == "list_state":
        assert ops["merge"] > 0


def test_watermark_evictions_are_deletes(loaded) -> None:
    ckpt = loaded["watermark"]
    ops = Counter(r.op for f in changelogs(ckpt) for r in ckpt.read_changelog(f)[1])
    assert ops["delete"] > 0 and ops["put"] > 0


def test_format_v1_changelogs_have_no_lineage(loaded) -> None:
    ckpt = loaded["format_v1"]
    assert all(b.commit.state_unique_ids is None for b in ckpt.batches.values() if b.committed)
    for f in changelogs(ckpt):
        header, records = ckpt.read_changelog(f)
        assert header.format_version == 1 and header.lineage is None
        assert records


def test_zstd_changelogs(loaded, corpus) -> None:
    ckpt = loaded["zstd"]
    assert ckpt.changelog_codec == "zstd"
    for f in changelogs(ckpt):
        assert (corpus["zstd"] / f.rel).read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic
        header, records = ckpt.read_changelog(f)
        assert header.format_version == 3 and records
