"""A retirement manifest is a handback: a person reads it, and anyone who can write the audit trail
can edit it. These are the reproductions of its breaks (docs/safety.md, "a handback never widens an
action" and "nothing is deleted on a record's word"), each through `ckpt retire --apply` with no
flag but those the case needs: a number that is not one, a manifest forged for a folder that is
not a dormant checkpoint, and an archive gone between two runs of one apply."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import time
from pathlib import Path

from checkpoint.crash import CRASH_ENV
from checkpoint.format import AUDIT_FOLDER
from checkpoint.retire.manifest import Evidence, RetirementPlan, file_line
from checkpoint.safety import folder_name
from checkpoint.storage import FileInfo, Storage
from testbed.clock import date_to
from tests.support.cli import ckpt, measured
from tests.support.files import files_of
from tests.support.leases import lapse_leases
from tests.support.retiring import DAY, SHORT, apply, dormant_copy, plan


def test_a_manifest_whose_numbers_are_not_numbers_retires_nothing(corpus, tmp_path) -> None:
    """`planned_at: NaN` made `now < NaN + grace` false: every file was deleted at once, exit 0."""
    orders = dormant_copy(corpus, "long_chain", tmp_path / "root")
    before = files_of(orders)
    planned = plan(orders, "--no-archive")
    manifest = Path(planned["manifest"])
    head, rest = manifest.read_text().split("\n", 1)
    at = json.dumps(json.loads(head)["planned_at"])
    for value in ("NaN", "Infinity", "-Infinity", "1e400", "true", "-1e18", "9" * 1001):
        manifest.write_text(head.replace(f'"planned_at": {at}', f'"planned_at": {value}') + "\n" + rest)
        out = apply(str(manifest))  # the default grace, no flag
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (value, out.stderr)
        assert "Traceback" not in out.stderr and "unreadable retirement manifest" in out.stderr, out.stderr
    manifest.write_text(head + "\n" + rest)  # as it was: within its grace still
    out = apply(str(manifest))
    assert out.returncode == 2 and "within its grace of 7d" in out.stderr
    assert files_of(orders) == before


def _forged(folder: Path, plan_id: str, planned_at: float) -> tuple[Path, RetirementPlan]:
    """A manifest as `ckpt retire` writes one, for every file `folder` holds, placed where the
    audit trail beside it keeps that folder's plans, its mtime ten days back."""
    files = sorted(
        (p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.relative_to(folder).as_posix()
    )
    infos = [FileInfo(p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime) for p in files]
    url = Storage(str(folder)).url
    evidence = Evidence(last_commit=None, last_commit_at=None, last_offset=None, last_offset_at=None,
                        dormant_since=planned_at - 9 * DAY, dormant_seconds=7 * DAY)  # fmt: skip
    plan_ = RetirementPlan(plan_id=plan_id, checkpoint=url, planned_at=planned_at, evidence=evidence,
                           files=len(infos), total_bytes=sum(i.size for i in infos), newest_file_at=None,
                           archive=None)  # fmt: skip
    manifest = folder.parent / AUDIT_FOLDER / folder_name(url) / f"{plan_id}.retire.jsonl"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_bytes(plan_.header().encode() + b"\n" + b"".join(file_line(i) for i in infos))
    os.utime(manifest, (planned_at, planned_at))
    return manifest, plan_


def test_a_forged_manifest_deletes_nothing_that_is_not_a_dormant_checkpoint(corpus, tmp_path) -> None:
    """The header named a plain folder holding `important.txt`, `sub/db.bin` and a nested
    checkpoint, `archive: null`, the manifest's mtime ten days back: the apply deleted all of it.
    Now the manifest must match its plan's record beside the folder, and even a record forged
    there too (by someone who can write beside it) deletes nothing: the apply judges the folder
    itself again, and it is no checkpoint, and holds one."""
    root = tmp_path / "root"
    plain = root / "plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "important.txt").write_text("keep me")
    (plain / "sub" / "db.bin").write_bytes(os.urandom(4096))
    dormant_copy(corpus, "long_chain", plain, "nested")
    date_to(plain, 10 * DAY)
    before = files_of(plain)
    ten_days_ago = time.time() - 10 * DAY
    plan_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ten_days_ago)) + "000Z-0a1b2c3d"
    manifest, forged = _forged(plain, plan_id, float(int(ten_days_ago)))

    out = apply(str(manifest))  # the default grace, no flag
    assert out.returncode == 2 and "no record of plan" in out.stderr, out.stderr
    assert files_of(plain) == before

    from checkpoint.retire.record import PlanRecord, folder_of
    from checkpoint.safety import Place, own_place, sha256_of

    storage, folder = own_place(Storage(str(plain)))  # the record forged beside it too
    record = Path(storage.full(f"{folder}/retirements/{plan_id}.json"))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_bytes(
        PlanRecord.of(
            forged,
            sha256_of(str(manifest)),
            manifest.stat().st_size,
            str(Place.of(Storage(str(plain)))),
            folder_of(Storage(str(plain))),
        ).dump()
    )
    out = apply(str(manifest))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "holds another checkpoint (nested)" in out.stderr or "not a checkpoint" in out.stderr, out.stderr
    assert files_of(plain) == before


def test_an_edited_manifest_or_record_retires_nothing(corpus, tmp_path) -> None:
    """A manifest is trusted as far as it matches its plan's record: a line edited (a file's size),
    a record dated back, a record removed. Each refuses in one line before any lease."""
    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    before = files_of(orders)
    planned = plan(orders, "--no-archive")
    manifest = Path(planned["manifest"])
    text = manifest.read_text()
    head, first, rest = text.split("\n", 2)
    row = json.loads(first)
    manifest.write_text("\n".join([head, json.dumps({**row, "bytes": row["bytes"] + 1}), rest]))
    time.sleep(1.1)
    out = apply(str(manifest), *SHORT)
    assert out.returncode == 2 and "not the one planned" in out.stderr, out.stderr
    manifest.write_text(text)
    from checkpoint.safety import own_place

    storage, folder = own_place(Storage(str(orders)))
    record = Path(storage.full(f"{folder}/retirements/{planned['plan_id']}.json"))
    kept = record.read_bytes()
    doc = json.loads(kept)
    record.write_text(json.dumps({**doc, "planned_at": doc["planned_at"] - 30 * DAY}))
    out = apply(str(manifest))  # dated a month back: the grace would have passed
    assert out.returncode == 2 and "disagrees with its plan's record (planned_at)" in out.stderr, out.stderr
    record.unlink()
    out = apply(str(manifest), *SHORT)
    assert out.returncode == 2 and "no record of plan" in out.stderr
    record.write_bytes(kept)
    assert files_of(orders) == before
    assert not list((root / AUDIT_FOLDER).rglob("lease/*.json"))  # refused before any lease


def test_an_empty_or_truncated_manifest_says_so(corpus, tmp_path) -> None:
    orders = dormant_copy(corpus, "long_chain", tmp_path / "root")
    planned = plan(orders, "--no-archive")
    manifest = Path(planned["manifest"])
    head = manifest.read_text().split("\n", 1)[0]
    for text, said in (("", "the manifest is empty"), (head[:40], "ends within its header")):
        manifest.write_text(text)
        out = apply(str(manifest), *SHORT)
        assert out.returncode == 2 and said in out.stderr, out.stderr


def test_a_rerun_reads_its_archive_back_before_it_deletes_more(corpus, tmp_path) -> None:
    """An apply killed after its archive and its first delete, the archive then removed (a bucket
    lifecycle rule, a person): the rerun deleted the other 539 files and printed "archived at
    batch 19". Now it reads the archive back first, and refuses while it is gone."""
    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    archive = tmp_path / "archive"
    planned = plan(orders, "--archive", str(archive))
    time.sleep(1.1)
    args = (*SHORT, "--batch-size", "1", "--lease-ttl", "10m")
    died = apply(planned["manifest"], *args, env={CRASH_ENV: "retire.deleted:1"})
    assert died.returncode == -signal.SIGKILL
    left = files_of(orders)
    assert len(left) == planned["files"] - 1
    shutil.rmtree(archive)
    lapse_leases(root)
    out = apply(planned["manifest"], *args)
    assert out.returncode == 2 and "the archive" in out.stderr and "is gone" in out.stderr, out.stderr
    assert "nothing more is deleted" in out.stderr and files_of(orders) == left


def test_an_archive_gone_before_deletion_began_is_made_again(corpus, tmp_path) -> None:
    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    archive = tmp_path / "archive"
    planned = plan(orders, "--archive", str(archive))
    time.sleep(1.1)
    args = (*SHORT, "--lease-ttl", "10m")
    died = apply(planned["manifest"], *args, env={CRASH_ENV: "retire.archived"})
    assert died.returncode == -signal.SIGKILL and len(files_of(orders)) == planned["files"]
    shutil.rmtree(archive)
    lapse_leases(root)
    done = apply(planned["manifest"], *args)
    assert done.returncode == 0, done.stderr
    assert not orders.exists() and ckpt("validate", str(archive)).returncode == 0


def test_an_archive_through_a_link_into_the_checkpoint_is_refused_when_planned(corpus, tmp_path) -> None:
    """`retire --archive` through a link to a folder inside the checkpoint was accepted; its apply
    then wrote lease generations into the checkpoint and refused, so the plan never applied."""
    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    (orders / "spare").mkdir()
    link = tmp_path / "archive"
    link.symlink_to(orders / "spare")
    before = files_of(orders)
    out = ckpt("retire", str(orders), "--archive", str(link))
    assert out.returncode == 2 and "resolves to" in out.stderr and "overlap" in out.stderr, out.stderr
    assert files_of(orders) == before
    assert not list((root / AUDIT_FOLDER).rglob("*.retire.jsonl"))


def _killed_after_first_delete(corpus, tmp_path, archive: Path) -> tuple[Path, dict, tuple]:
    orders = dormant_copy(corpus, "long_chain", tmp_path / "root")
    planned = plan(orders, "--archive", str(archive))
    time.sleep(1.1)
    args = (*SHORT, "--batch-size", "5", "--lease-ttl", "10m")
    died = apply(planned["manifest"], *args, env={CRASH_ENV: "retire.deleted:1"})
    assert died.returncode == -signal.SIGKILL
    lapse_leases(orders.parent)
    return orders, planned, args


def test_a_rerun_refuses_an_archive_that_is_not_the_one_its_deletion_began_with(corpus, tmp_path) -> None:
    """The review: the archive removed after deletion began, and a fork of another checkpoint at the
    same batch put in its place: the rerun took it and deleted the rest. The marker of deletion
    beside the checkpoint names the archive's source and query id, and the rerun checks both."""
    archive = tmp_path / "archive"
    orders, planned, args = _killed_after_first_delete(corpus, tmp_path, archive)
    left = files_of(orders)
    shutil.rmtree(archive)
    other = dormant_copy(corpus, "long_chain", tmp_path / "elsewhere", "other")
    forked = ckpt("fork", str(other), str(archive), "--new-query-id")
    assert forked.returncode == 0, forked.stderr
    out = apply(planned["manifest"], *args)
    assert out.returncode == 2 and "is not the one this plan's deletion began with" in out.stderr, out.stderr
    assert files_of(orders) == left


def test_a_checkpoint_moved_or_replaced_since_its_plan_retires_nothing(corpus, tmp_path) -> None:
    """Planned through a link: the link repointed to a copy before the apply, or the folder itself
    replaced by a copy at the same path (names, sizes and mtimes all as planned). The apply works on
    the place its plan recorded, and on the folder it recorded there."""
    root = tmp_path / "root"
    real = dormant_copy(corpus, "long_chain", root, "real")
    copy = root / "copy"
    shutil.copytree(real, copy, copy_function=shutil.copy2)
    link = root / "orders"
    link.symlink_to(real)
    planned = plan(link, "--no-archive")
    time.sleep(1.1)
    link.unlink()
    link.symlink_to(copy)
    out = apply(planned["manifest"], *SHORT)  # its record is beside the place planned, not there
    assert out.returncode == 2 and "no record of plan" in out.stderr, out.stderr
    link.unlink()
    link.symlink_to(real)
    moved = root / "moved"
    real.rename(moved)
    shutil.copytree(moved, real, copy_function=shutil.copy2)
    out = apply(planned["manifest"], *SHORT)
    assert out.returncode == 2 and "not the one planned (another folder was put" in out.stderr, out.stderr
    assert files_of(real) == files_of(moved) and files_of(copy)


def test_a_nested_checkpoint_with_no_batch_yet_is_not_retired(corpus, tmp_path) -> None:
    """A query started in a folder below, its `metadata` written and its logs' folders still empty:
    a checkpoint by the docs' own definition, which the plan took for a file to delete."""
    orders = dormant_copy(corpus, "long_chain", tmp_path / "root")
    nested = orders / "sub"
    (nested / "offsets").mkdir(parents=True)
    (nested / "commits").mkdir()
    (nested / "metadata").write_text('{"id":"11111111-2222-3333-4444-555555555555"}')
    date_to(orders, 9 * DAY)
    out = ckpt("retire", str(orders), "--no-archive")
    assert out.returncode == 2 and "holds another checkpoint (sub)" in out.stderr, out.stderr


def test_the_trail_of_an_apply_is_read_as_data(corpus, tmp_path) -> None:
    """The apply's own records in the trail, edited: a line that is not JSON (a traceback before), a
    record whose counts are not counts, a sparse gigabyte (2.1 GB of memory before); and a manifest
    grown past its recorded size, refused before it is copied."""
    archive = tmp_path / "archive"
    orders, planned, args = _killed_after_first_delete(corpus, tmp_path, archive)
    left = files_of(orders)
    trail = tmp_path / "root" / AUDIT_FOLDER / folder_name(Storage(str(orders)).url)
    outcomes = trail / f"{planned['plan_id']}.retire-outcomes.jsonl"
    kept = outcomes.read_bytes()
    for bad in (
        b"\xff\xfe not json\n",
        b'{"step": "deleted", "files": true}\n',
        b'{"step": "deleted", "files": -3}\n',
    ):
        outcomes.write_bytes(kept + bad)
        out = apply(planned["manifest"], *args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, (
            out.stderr
        )
    outcomes.write_bytes(kept)
    os.truncate(outcomes, 1000 << 20)
    out, peak = measured("retire", "--apply", planned["manifest"], *args)
    assert out.returncode == 2 and peak < 400 << 20, (peak, out.stderr)
    outcomes.write_bytes(kept)
    manifest = Path(planned["manifest"])
    with open(manifest, "ab") as f:
        f.write(b" " * 100)
    out = apply(planned["manifest"], *args)
    assert out.returncode == 2 and "not the one planned" in out.stderr and "bytes" in out.stderr, out.stderr
    assert files_of(orders) == left


def test_a_dormancy_under_its_floor_is_refused(corpus, tmp_path) -> None:
    """`--dormant-after 1s` planned a checkpoint committed seconds before; a day is the floor, as
    Dagster's `dormant_after` has it, unless the plan says it is unsafe."""
    orders = dormant_copy(corpus, "long_chain", tmp_path / "root")
    date_to(orders, 600)
    out = ckpt("retire", str(orders), "--no-archive", "--dormant-after", "1s")
    assert out.returncode == 2 and "below the floor of 1d" in out.stderr, out.stderr
    out = ckpt("retire", str(orders), "--no-archive", "--dormant-after", "0s", "--unsafe-short-grace")
    assert out.returncode == 2 and "outside 1 to" in out.stderr, out.stderr
    assert not list((tmp_path / "root" / AUDIT_FOLDER).rglob("*.retire.jsonl"))


def test_a_forged_record_retires_no_checkpoint_written_since_its_plan(corpus, tmp_path) -> None:
    """The review's reproduction: a manifest and its record forged beside a live checkpoint (its
    last commit a minute old), planned 8 days back, with a dormancy of 1 s (below the floor) or of
    7 days, with or without a forged deletion marker (which skipped the dormancy check). The
    apply, with no flag, deleted all 420 files. Now a record below the floor needs the unsafe
    flag, and a file written after the plan's time refuses the apply however the manifest lists
    it: nothing deleted."""
    from checkpoint.retire.record import PlanRecord, folder_of
    from checkpoint.safety import Place, own_place, sha256_of

    root = tmp_path / "root"
    live = dormant_copy(corpus, "long_chain", root)
    date_to(live, 60)  # committed a minute ago
    before = files_of(live)
    eight_days_ago = float(int(time.time() - 8 * DAY))
    storage, folder = own_place(Storage(str(live)))
    for n, (dormancy, marker) in enumerate([(1.0, False), (7 * DAY, False), (7 * DAY, True), (1.0, True)]):
        at = eight_days_ago - n  # a plan id of its own each
        plan_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(at)) + "000Z-0a1b2c3d"
        manifest, forged = _forged(live, plan_id, at)
        forged = dataclasses.replace(
            forged, evidence=dataclasses.replace(forged.evidence, dormant_seconds=dormancy)
        )
        manifest.write_bytes(forged.header().encode() + b"\n" + manifest.read_bytes().split(b"\n", 1)[1])
        record = Path(storage.full(f"{folder}/retirements/{plan_id}.json"))
        record.parent.mkdir(parents=True, exist_ok=True)
        place, held = str(Place.of(Storage(str(live)))), folder_of(Storage(str(live)))
        record.write_bytes(PlanRecord.of(forged, sha256_of(str(manifest)), manifest.stat().st_size, place,
                                         held).dump())  # fmt: skip
        if marker:
            mark = record.with_suffix(".deleting")
            mark.write_text(json.dumps({"plan_id": plan_id, "at": at, "archived": None}))
        out = apply(str(manifest))  # the default grace, no flag
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (dormancy, marker, out.stderr)
        why = "below the floor of 1d" if dormancy < DAY else "was written"
        assert why in out.stderr and "Traceback" not in out.stderr, (dormancy, marker, out.stderr)
        assert files_of(live) == before


def test_an_audit_trail_inside_the_checkpoint_is_refused_when_planned(corpus, tmp_path) -> None:
    """`--audit` at or inside the checkpoint was taken: the manifest and `held.json` landed in it,
    and every apply then found them unplanned. Refused by place, as gc and the purge refuse it."""
    orders = dormant_copy(corpus, "long_chain", tmp_path / "root")
    before = files_of(orders)
    for inside in (orders, orders / "trail", orders / "state" / "trail"):
        out = ckpt("retire", str(orders), "--no-archive", "--audit", str(inside))
        assert out.returncode == 2 and "the audit trail and the source overlap" in out.stderr, out.stderr
        assert files_of(orders) == before
    # In the archive, the plan's manifest left it not empty, and no apply could ever fork into it
    # (the review): refused when planned, nothing written there.
    archive, trail = tmp_path / "archive", tmp_path / "trail"
    out = ckpt("retire", str(orders), "--archive", str(archive), "--audit", str(archive / "trail"))
    assert out.returncode == 2 and "the audit trail and the archive overlap" in out.stderr, out.stderr
    # The archive in the trail's folder of the checkpoint, where the plan writes (helper-25).
    mine = folder_name(Storage(str(orders)).url)
    out = ckpt("retire", str(orders), "--archive", str(trail / mine / "arch"), "--audit", str(trail))
    assert out.returncode == 2 and "the archive and the audit trail's folder" in out.stderr, out.stderr
    assert not archive.exists() and not trail.exists() and files_of(orders) == before
    # An archive elsewhere in the trail is not where the plan writes: planned (helper-26).
    out = ckpt("retire", str(orders), "--archive", str(trail / "archives" / "orders"), "--audit", str(trail))
    assert out.returncode == 0, out.stderr
