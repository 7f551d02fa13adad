"""A plan's manifest handed back to the apply: an edited one, or a forged one whose digest
matches, deletes nothing (a handback never widens an action)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from checkpoint.errors import GcError
from checkpoint.format.layout import FileKind
from checkpoint.model.checkpoint import load_checkpoint
from checkpoint.model.lineage import store_ids
from checkpoint.safety import AuditTrail, PlannedFile
from checkpoint.storage import Storage
from tests.support.planning import apply_unleased, plan_later


def _lines_naming(path: Path, rels: list[str]) -> str:
    """Manifest lines for files as they are: their true size and mtime, as an editor would write."""
    return "".join(
        PlannedFile(rel, (path / rel).stat().st_size, (path / rel).stat().st_mtime, "superseded", None).line()
        for rel in rels
    )


def _committed_files(path: Path) -> list[str]:
    """What recovery at the latest batch reads first: each store's committed changelog or zip."""
    ckpt = load_checkpoint(str(path))
    batch = ckpt.latest_committed_batch
    ids = {(sid.operator, sid.partition, sid.store, ckpt.committed_unique_id(batch, sid))
           for sid in store_ids(ckpt, batch)}  # fmt: skip
    return sorted(f.info.rel for f in ckpt.files if f.kind in (FileKind.CHANGELOG, FileKind.ZIP)
                  and f.what.version == batch + 1
                  and (f.what.operator, f.what.partition, f.what.store, f.what.unique_id) in ids)  # fmt: skip


def _everything(path: Path) -> dict[str, tuple[int, float]]:
    return {p.relative_to(path).as_posix(): (p.stat().st_size, p.stat().st_mtime)
            for p in path.rglob("*") if p.is_file()}  # fmt: skip


def test_an_edited_manifest_deletes_nothing(copy_of, tmp_path) -> None:
    """The reproduction: lines naming the query metadata and the newest commit and offset, with
    their true size and mtime, appended to a plan's manifest. The digest the planner returned
    (held by the caller, never read from the manifest) refuses the whole apply."""
    path = copy_of("two_actions")
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(path, audit=audit)
    latest = load_checkpoint(str(path)).latest_committed_batch
    with open(plan.manifest, "a") as manifest:
        manifest.write(_lines_naming(path, ["metadata", f"commits/{latest}", f"offsets/{latest}"]))
    before = _everything(path)
    with pytest.raises(GcError, match="not the one planned"):
        apply_unleased(plan, Storage(str(path)), audit)
    with pytest.raises(GcError, match="no digest"):  # a plan read back from its manifest alone
        apply_unleased(audit.read_plan(plan.manifest), Storage(str(path)), audit)
    assert _everything(path) == before


@pytest.mark.parametrize("what", ["logs", "committed state", "outside state/"])
def test_a_manifest_naming_what_a_batch_reads_deletes_nothing_even_with_its_digest(
    copy_of, tmp_path, what
) -> None:
    """A manifest whose digest matches (a forged record, or a bug in the planner) is still not
    trusted: every line is classified again under the lease against the commit log read then,
    and one line that is not an orphan now refuses the apply before the first deletion."""
    path = copy_of("two_actions")
    audit = AuditTrail(str(tmp_path / "audit"))
    plan = plan_later(path, audit=audit)
    latest = load_checkpoint(str(path)).latest_committed_batch
    victims = {
        "logs": ["metadata", f"commits/{latest}", f"offsets/{latest}"],
        "committed state": _committed_files(path)[:1],
        "outside state/": ["state/0/_metadata/metadata"],
    }[what]
    assert victims
    forged_lines = tmp_path / "lines.jsonl"
    planned = Path(plan.manifest).read_text().splitlines(keepends=True)[1:]
    forged_lines.write_text("".join(planned) + _lines_naming(path, victims))
    forged_plan = dataclasses.replace(plan, plan_id=f"{plan.plan_id}-forged")
    forged = audit.write_manifest(forged_plan, [str(forged_lines)])
    before = _everything(path)
    with pytest.raises(GcError, match="refused, nothing deleted: its manifest names"):
        apply_unleased(forged, Storage(str(path)), audit)
    assert _everything(path) == before
    assert apply_unleased(plan, Storage(str(path)), audit).deleted.files  # the plan as made still applies
