"""Property tests: over random store histories, cleanup never removes a file a retained batch loads.

The oracle below is Spark's load path (docs/format.md §7) written independently of the
planner: a batch of the window that loads before the cleanup must load, from the same files, after
the candidates are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.cleanup.rules import GcOptions, RetentionInputs, UnsafeToPlan, find_orphans
from checkpoint.format.changelog import LineageEntry
from checkpoint.format.layout import classify
from checkpoint.model.checkpoint import CheckpointFile, StoreId
from checkpoint.storage import FileInfo

NOW = 1_000_000.0
GRACE = 3600.0


def uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-000000000000"


def sst_name(n: int) -> str:
    return f"{n:06d}-{uid(n)}.sst"


@dataclass
class History:
    files: dict[str, float]  # rel -> mtime
    committed: dict[int, dict[StoreId, str]]  # every committed batch still in the commit log
    lineages: dict[str, tuple[LineageEntry, ...]]
    zip_ssts: dict[str, tuple[str, ...]]
    latest: int


@st.composite
def histories(draw) -> History:
    partitions = draw(st.integers(1, 2))
    versions = draw(st.integers(1, 9))
    counter = iter(range(1, 10_000))
    files: dict[str, float] = {}
    lineages: dict[str, tuple[LineageEntry, ...]] = {}
    zip_ssts: dict[str, tuple[str, ...]] = {}
    committed: dict[int, dict[StoreId, str]] = {b: {} for b in range(versions)}

    def age() -> float:
        return NOW - draw(st.sampled_from([10.0, GRACE * 2, GRACE * 10]))

    for p in range(partitions):
        sid = StoreId(0, p, "default")
        folder = f"state/0/{p}"
        ssts = [next(counter) for _ in range(draw(st.integers(1, 5)))]
        for n in ssts:
            files[f"{folder}/SSTs/{sst_name(n)}"] = age()
        snapshots: dict[int, str] = {}  # version -> committed id with a zip
        ids: dict[int, str] = {}
        for v in range(1, versions + 1):
            ids[v] = u = uid(next(counter))
            committed[v - 1][sid] = u
            # the lineage starts at the newest snapshot, or reaches further back
            newest_zip = max((x for x in snapshots if x < v), default=1)
            start = draw(st.integers(1, newest_zip)) if v > 1 else v
            rel = f"{folder}/{v}_{u}.changelog"
            files[rel] = age()
            lineages[rel] = tuple(LineageEntry(x, ids[x]) for x in range(start, v))
            if draw(st.booleans()):
                z = f"{folder}/{v}_{u}.zip"
                files[z] = age()
                zip_ssts[z] = tuple(
                    sst_name(n) for n in draw(st.lists(st.sampled_from(ssts), min_size=1, max_size=3))
                )
                snapshots[v] = u
            for _ in range(draw(st.integers(0, 2))):  # attempts that lost, replays
                other = uid(next(counter))
                files[f"{folder}/{v}_{other}.changelog"] = age()
                if draw(st.booleans()):
                    z = f"{folder}/{v}_{other}.zip"
                    files[z] = age()
                    zip_ssts[z] = (sst_name(draw(st.sampled_from(ssts))),)
            for f in [k for k in files if k.startswith(f"{folder}/{v}_")]:
                if draw(st.booleans()):
                    files[f + ".crc"] = files[f]
                if draw(st.booleans()):
                    files[f"{folder}/.{f.rsplit('/', 1)[1]}.crc"] = files[f]
        if draw(st.booleans()):  # a stale sidecar
            files[f"{folder}/{versions}_{uid(next(counter))}.zip.crc"] = age()
        # Spark's own pruning: everything below a version no later than the latest chain's base
        latest_chain_base = max((x for x in snapshots), default=1)
        prune = draw(st.integers(1, latest_chain_base))
        for rel in [r for r in files if r.startswith(folder + "/") and "/SSTs/" not in r]:
            name = rel.rsplit("/", 1)[1].lstrip(".")
            if int(name.split("_")[0]) < prune:
                del files[rel]
    first_commit = draw(st.integers(0, versions - 1))
    return History(
        files,
        {b: s for b, s in committed.items() if b >= first_commit},
        lineages,
        {z: s for z, s in zip_ssts.items() if z in files},
        versions - 1,
    )


def _inputs(h: History, window: list[int]) -> RetentionInputs:
    files = tuple(
        CheckpointFile(FileInfo(rel, 1, mtime), classify(rel)) for rel, mtime in sorted(h.files.items())
    )
    return RetentionInputs(files, h.latest, {b: h.committed[b] for b in window}, h.lineages, h.zip_ssts)


def loads(present: set[str], h: History, sid: StoreId, version: int, u: str) -> frozenset[str] | None:
    """The files Spark reads to load (version, u), or None when the load fails."""
    folder = f"state/0/{sid.partition}"

    def zip_ok(z: str) -> bool:
        return all(f"{folder}/SSTs/{s}" in present for s in h.zip_ssts.get(z, ()))

    z = f"{folder}/{version}_{u}.zip"
    if z in present:
        return frozenset({z, *(f"{folder}/SSTs/{s}" for s in h.zip_ssts[z])}) if zip_ok(z) else None
    changelog = f"{folder}/{version}_{u}.changelog"
    if changelog not in present:
        return None
    lineage = h.lineages[changelog]
    needed = {changelog}
    for e in reversed(lineage):
        base = f"{folder}/{e.version}_{e.unique_id}.zip"
        if base in present:
            if not zip_ok(base):
                return None
            return frozenset(needed | {base, *(f"{folder}/SSTs/{s}" for s in h.zip_ssts[base])})
        link = f"{folder}/{e.version}_{e.unique_id}.changelog"
        if link not in present:
            return None
        needed.add(link)
    return frozenset(needed) if (lineage[0].version if lineage else version) == 1 else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.one_of(st.none(), st.integers(1, 4)), st.booleans())
def test_no_retained_batch_loses_a_file_it_loads(h: History, retain: int | None, live: bool) -> None:
    batches = sorted(h.committed)
    window = batches[-retain:] if retain else batches
    try:
        scan = find_orphans(_inputs(h, window), GcOptions(grace_seconds=GRACE, live=live), NOW)
    except UnsafeToPlan:
        # Refusing is always safe; it must only happen when the latest batch cannot load.
        sid_u = h.committed[h.latest]
        assert any(loads(set(h.files), h, sid, h.latest + 1, u) is None for sid, u in sid_u.items())
        return
    deleted = {c.rel for c in scan.candidates}
    remaining = set(h.files) - deleted
    for b in window:
        for sid, u in h.committed[b].items():
            before = loads(set(h.files), h, sid, b + 1, u)
            if before is not None:
                assert loads(remaining, h, sid, b + 1, u) == before, (b, sid)
    for c in scan.candidates:
        assert c.rel.startswith("state/")
        assert NOW - h.files[c.rel] >= GRACE
        if live and c.file.what.version is not None:
            assert c.file.what.version <= h.latest + 1 - 2
    # a zip that stays never points at a missing SST
    for z, listed in h.zip_ssts.items():
        if z in remaining:
            folder = z.rsplit("/", 1)[0]
            assert all(f"{folder}/SSTs/{s}" in remaining for s in listed), z
