"""The filesystem and the orchestrator are input too (docs/safety.md, "nothing outside a
checkpoint is read or deleted"): links swapped mid-action, FIFOs and devices where Spark writes a
file, a full disk, names made to forge a row. Each case is derived from a checkpoint a real query
wrote and run through the `ckpt` command or the core (the sensor's and its cursor's cases are in
tests/orchestration/test_untrusted_input.py)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from checkpoint.safety import lease_for
from checkpoint.storage import Storage
from cli.main import main as ckpt_main
from tests.support import damage
from tests.support.cli import CKPT
from tests.support.damage import IN_THE_COMMIT_LOG


def ckpt(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([CKPT, *args], capture_output=True, text=True, timeout=timeout)


def _aged(path: Path, hours: float = 10) -> Path:
    """Every file dated `hours` back, as a query stopped that long ago left it."""
    old = time.time() - hours * 3600
    for folder, _, names in os.walk(path):
        for name in names:
            os.utime(os.path.join(folder, name), (old, old), follow_symlinks=False)
    return path


def _files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _lease_is_free(path: Path) -> bool:
    lease = lease_for(Storage(str(path)), owner="test")
    with lease.acquire():
        return True


# 1. Cleanup deletes only through the folders the plan saw


def test_a_folder_swapped_for_a_link_during_the_apply_deletes_nothing_outside(
    copy_of, tmp_path, monkeypatch, capsys
) -> None:
    """The issue's reproduction: `gc --apply --batch-size 1` on a stream-stream join, paused after
    its first delete while two partition folders are moved away and replaced by links to copies
    outside the root. Every file outside stays; what the links hid is reported FAILED, with why."""
    from checkpoint.cleanup import apply

    path = _aged(copy_of("join"))
    outside = tmp_path / "another-team"
    swapped = ["state/0/2", "state/0/3"]

    def swap(point: str, n: int) -> None:
        if point != "cleanup.deleted" or n != 1:
            return
        for rel in swapped:
            copy = outside / rel
            shutil.copytree(path / rel, copy, symlinks=True)  # copy2: the same sizes and mtimes
            (path / rel).rename(tmp_path / f"moved-{rel.replace('/', '-')}")
            (path / rel).symlink_to(copy, target_is_directory=True)

    monkeypatch.setattr(apply, "crash_point", swap)
    code = ckpt_main(["gc", str(path), "--query-stopped", "--retain-batches", "2", "--apply",
                      "--batch-size", "1", "--grace", "0s", "--unsafe-short-grace", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    before = {rel: _files_under(tmp_path / f"moved-{rel.replace('/', '-')}") for rel in swapped}
    assert all(before.values()), "the swapped folders held files"
    for rel in swapped:
        assert _files_under(outside / rel) == before[rel], f"files outside the root under {rel} were deleted"
    applied = doc
    assert applied["applied"] and applied["deleted"] >= 1 and applied["failed"] >= 1, applied
    assert code == 1
    whys = " ".join(applied["failed_why"])
    assert "plan saw a folder" in whys, applied["failed_why"]
    assert all(f["path"].startswith(tuple(swapped)) for f in applied["failures"]), applied["failures"]
    assert _lease_is_free(path)


def test_a_checkpoint_folder_replaced_since_the_plan_is_not_gone_through(copy_of, tmp_path) -> None:
    """A plan holds the device and inode of each folder down to its partitions: a folder of the
    same name moved into place after the plan (not a link: the same names, the same files) is
    not the plan's, and nothing in it is deleted."""
    from checkpoint.cleanup import plan_gc
    from checkpoint.safety import AuditTrail
    from tests.support.planning import apply_unleased

    path = _aged(copy_of("join"))
    storage = Storage(str(path))
    plan = plan_gc(storage, AuditTrail(str(tmp_path / "audit")), grace_seconds=0, allow_short_grace=True,
                   retain_batches=2, query_stopped=True)  # fmt: skip
    assert plan.files > 0 and plan.folder_ids.get("state/0/0")
    copy = tmp_path / "state-0-0"
    shutil.copytree(path / "state/0/0", copy, symlinks=True)
    shutil.rmtree(path / "state/0/0")
    copy.rename(path / "state/0/0")
    kept = _files_under(path / "state/0/0")
    result = apply_unleased(plan, storage, AuditTrail(str(tmp_path / "audit")))
    assert _files_under(path / "state/0/0") == kept
    assert result.failed.files >= 1 and all(o.path.startswith("state/0/0/") for o in result.failed.sample)


# 2. Every file an action reads resolves inside its checkpoint


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret" / "credentials"
    secret.parent.mkdir()
    secret.write_text("AKIA-NOT-FOR-THE-CHECKPOINT\n")
    return secret


@pytest.mark.parametrize("command", ["validate", "inspect", "fork", "migrate"])
def test_a_metadata_file_linked_outside_is_never_read(defaults, tmp_path, command) -> None:
    from testbed.copying import copy_checkpoint

    path = copy_checkpoint(defaults["hdfs_agg"], tmp_path / "q")
    (path / "metadata").unlink()
    (path / "metadata").symlink_to(_secret(tmp_path))
    args = [str(path)] if command in ("validate", "inspect") else [str(path), str(tmp_path / "dest")]
    out = ckpt(command, *args)
    assert "AKIA" not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    if command == "validate":
        assert out.returncode == 1 and "FILE_OUTSIDE_CHECKPOINT" in out.stdout, out.stdout
    else:
        assert out.returncode == 2 and "outside the checkpoint" in out.stderr, out.stderr
        assert not (tmp_path / "dest").exists() or not any((tmp_path / "dest").rglob("metadata"))


def _linked_to_a_secret(path: Path, what: str, secret: Path) -> Path:
    """The newest source log, or the first state file recovery reads, swapped for a link to `secret`."""
    if what == "source log":
        target = max((path / "sources/0").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    else:
        entry = damage.lineage_of(path)
        target = path / (entry.base or entry.chain[0]).rel
    target.unlink()
    target.symlink_to(secret)
    return target


@pytest.mark.parametrize("what", ["source log", "state file"])
@pytest.mark.parametrize("command", ["fork", "migrate"])
def test_a_file_linked_outside_is_never_copied(defaults, tmp_path, command, what) -> None:
    """`sources/0/<n>` or a state file recovery reads, linked to a secret outside: the action
    refuses before it writes (exit 2, one line naming the link), and DEST never holds the bytes."""
    from testbed.copying import copy_checkpoint

    path = _aged(copy_checkpoint(defaults["hdfs_agg"], tmp_path / "q"))
    linked = _linked_to_a_secret(path, what, _secret(tmp_path))
    out = ckpt(command, str(path), str(tmp_path / "dest"))
    assert out.returncode == 2 and "outside the checkpoint" in out.stderr, out.stderr[-2000:]
    assert linked.name in out.stderr and "Traceback" not in out.stderr
    leaked = [p for p in (tmp_path / "dest").rglob("*") if p.is_file() and b"AKIA" in p.read_bytes()]
    assert not leaked


def test_a_state_zip_linked_outside_is_a_finding_and_never_copied(copy_of, tmp_path) -> None:
    path = copy_of("watermark")
    zip_file = damage.zip_files(path, damage.lineage_of(path))[-1]
    damage.link_outside(zip_file)
    validation = ckpt("validate", str(path))
    assert validation.returncode == 1 and "FILE_OUTSIDE_CHECKPOINT" in validation.stdout, validation.stdout
    fork = ckpt("fork", str(path), str(tmp_path / "dest"))
    assert fork.returncode == 2 and "outside the checkpoint" in fork.stderr, fork.stderr
    assert not list((tmp_path / "dest").rglob(zip_file.name))


# 3. Regular files only, bounded reads; 4. every look has a deadline


@pytest.mark.parametrize("which", sorted(IN_THE_COMMIT_LOG))
def test_a_fifo_or_a_device_in_the_commit_log_answers_every_command(corpus, tmp_path, which) -> None:
    damage_it, code = IN_THE_COMMIT_LOG[which]
    root = damage.root_with_a_bad_checkpoint(corpus, tmp_path, damage_it)
    bad = root / "bad"

    validate = ckpt("validate", str(bad), timeout=60)
    assert validate.returncode == 1 and code in validate.stdout, validate.stdout + validate.stderr
    scan = ckpt("scan", str(root), "--json", timeout=60)
    rows = {Path(r["path"]).name: r for r in json.loads(scan.stdout)["checkpoints"]}
    assert rows["bad"]["health"] != "ok" and rows["healthy"]["health"] == "ok", rows
    fleet = ckpt("fleet", str(root), "--json", timeout=60)
    assert {Path(r["url"]).name for r in json.loads(fleet.stdout)["checkpoints"]} == {"bad", "healthy"}
    gc = ckpt("gc", str(bad), "--apply", "--query-stopped", timeout=60)
    assert gc.returncode == 2 and "Traceback" not in gc.stderr and gc.stderr.count("\n") == 1, gc.stderr
    assert _lease_is_free(bad)


# 6. Faults never hide the answer or keep the lease


def test_a_full_disk_at_each_write_of_a_fork_is_one_line_and_the_lease_is_free(
    copy_of, tmp_path, monkeypatch, capsys
) -> None:
    """ENOSPC at the storage door from the k-th write of a fork on (the disk stays full), for k
    from the first write (the source's lease) to the last (the fork's completion marker): the fork
    refuses or stops with its own one-line message, never a traceback; a lease whose released
    marker cannot be written is given back by deleting its generation; the same fork run again,
    with room, finishes and validates."""
    from checkpoint.storage import local

    path = copy_of("snapshots")
    real = local.link_into_place
    writes = [0, 0]  # made, the first that fails (0: none)

    def door(target, temp_prefix, fill):
        writes[0] += 1
        if writes[1] and writes[0] >= writes[1]:
            raise OSError(errno.ENOSPC, "No space left on device", target)
        return real(target, temp_prefix, fill)

    monkeypatch.setattr(local, "link_into_place", door)
    monkeypatch.setattr(local.LocalBackend, "link", lambda *a, **k: False)  # copied, through the disk
    assert ckpt_main(["fork", str(path), str(tmp_path / "counted")]) == 0
    total = writes[0]
    forking = total - 2  # the last two writes: each lease's released marker
    capsys.readouterr()
    for k in sorted({1, 2, 3, 4, 6, 10, total // 2, forking - 1, forking, total - 1, total}):
        dest = tmp_path / f"dest-{k}"
        writes[:] = [0, k]
        code = ckpt_main(["fork", str(path), str(dest)])
        out = capsys.readouterr()
        assert "Traceback" not in out.err, (k, out.err)
        if k <= forking:
            assert code in (1, 2) and "No space left" in out.err, (k, out.err)
            assert out.err.strip().count("\n") == 0, (k, out.err)
        else:  # forked; only giving a lease back met the full disk: given back by deleting it
            assert code == 0 and "forked" in out.out, (k, out)
        writes[:] = [0, 0]
        assert _lease_is_free(path) and _lease_is_free(dest), k
        assert ckpt_main(["fork", str(path), str(dest)]) == 0, (k, capsys.readouterr().err)
    assert ckpt("validate", str(tmp_path / f"dest-{total}")).returncode == 0


def test_a_partition_folder_that_vanishes_during_the_apply_is_already_gone(
    copy_of, monkeypatch, capsys
) -> None:
    """Another cleanup (or a person) removes a partition folder while the apply runs: its files are
    SKIPPED as already gone, the others deleted, exit 0, and nothing is reported as deleted that
    this apply did not delete."""
    from checkpoint.cleanup import apply

    path = _aged(copy_of("join"))
    gone: list[str] = []

    def vanish(point: str, n: int) -> None:
        if point == "cleanup.deleted" and not gone:
            shutil.rmtree(path / "state/0/3")
            gone.append("state/0/3")

    monkeypatch.setattr(apply, "crash_point", vanish)
    code = ckpt_main(["gc", str(path), "--query-stopped", "--retain-batches", "2", "--apply",
                      "--batch-size", "1", "--grace", "0s", "--unsafe-short-grace", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["failed"] == 0 and doc["skipped"] >= 1, doc
    assert "already gone" in doc["skipped_why"], doc["skipped_why"]


def test_a_lease_that_cannot_be_released_says_how_in_one_line(tmp_path, caplog) -> None:
    (tmp_path / "q").mkdir()
    storage = Storage(str(tmp_path / "q"))
    lease = lease_for(storage, owner="test").acquire()

    def refuse(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    storage.backend.write_new = refuse  # type: ignore[method-assign]
    storage.backend.delete = lambda *a, **k: {"x": "EROFS"}  # type: ignore[method-assign]
    lease.release()  # never raises: the action's own message is what the caller sees
    warning = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warning) == 1 and "could not be released" in warning[0] and "delete" in warning[0]


# 7. Names are escaped on output; 8. the fleet view counts an applied plan as applied


def test_a_name_with_a_newline_prints_on_one_row(copy_of, tmp_path) -> None:
    root = tmp_path / "root"
    forged = 'x,"q"\n=1+1'
    shutil.move(str(copy_of("snapshots")), str(root / forged))
    for command in ("scan", "fleet"):
        out = ckpt(command, str(root))
        rows = [line for line in out.stdout.splitlines() if "x," in line or "=1+1" in line]
        assert rows and all('x,"q"\\n=1+1' in line for line in rows), out.stdout


def test_the_fleet_view_does_not_count_an_applied_plan(copy_of) -> None:
    path = _aged(copy_of("killed_after_restart"))
    planned = json.loads(ckpt("fleet", str(path.parent), "--plan", "--json").stdout)["checkpoints"]
    assert planned[0]["reclaimable_bytes"], planned
    assert ckpt("gc", str(path), "--apply", "--query-stopped").returncode == 0
    after = json.loads(ckpt("fleet", str(path.parent), "--json").stdout)["checkpoints"]
    assert not after[0].get("reclaimable_bytes"), after


@pytest.fixture
def small_disk(tmp_path: Path):
    """A tmpfs of its own (root only, as CI runs), filled by the test to leave a few pages."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, shutil.disk_usage(disk).free - leave))
    return filler


@pytest.mark.slow
def test_a_full_disk_during_a_compaction_fails_in_one_line_and_the_rerun_converges(
    spark, corpus, small_disk
) -> None:
    """`ckpt compact` on a disk with 24 KiB left: the stores whose publish meets ENOSPC are each
    reported with why (exit 1), never half published, the lease is given back and nothing
    committed is lost; with room again, the same compaction (in this session's Spark) compacts
    every store and the checkpoint validates."""
    import functools

    from checkpoint.compaction import CompactionOptions, compact_checkpoints
    from checkpoint.safety import EachInPlace, InPlace, taken_at_once
    from checkpoint.storage import Storage
    from jobs.compact import run_compaction_tasks
    from testbed.copying import copy_checkpoint

    path = copy_checkpoint(corpus["long_chain"], small_disk / "q")
    cmd = [CKPT, "compact", str(path), "--master", "local[2]", "--min-chain", "1", "--json"]
    # 24 KiB: one store compacts; the others meet ENOSPC at an SST, their zip or its sidecar
    for leave in (24 << 10,):
        filler = _fill(small_disk, leave)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
        failed = json.loads(out.stdout)["failed"]
        assert failed and all("No space left" in f["error"] for f in failed), failed
        # never half a publish: each zip there is has its sidecar (a zip without one is withdrawn)
        assert all(z.with_name(z.name + ".crc").exists() for z in path.glob("state/*/*/*.zip"))
        filler.unlink()
    assert _lease_is_free(path)
    assert ckpt("validate", str(path)).returncode == 0
    options = CompactionOptions(functools.partial(run_compaction_tasks, spark), min_chain=1, quiet_seconds=0)
    request = EachInPlace(["q"], lambda _: InPlace(Storage(str(path)), taken_at_once("tests")))
    again = compact_checkpoints(request, options)
    assert again.outcomes and all(o.ok for o in again.outcomes), [o.error for o in again.outcomes]
    assert set(again.chains_after["q"].values()) == {0}
    assert ckpt("validate", str(path)).returncode == 0


def test_a_full_audit_trail_stops_the_cleanup_in_one_line_and_the_rerun_converges(
    copy_of, small_disk, monkeypatch, capsys
) -> None:
    """The audit trail on a disk that fills after the first delete: the apply stops (exit 1, one
    line saying what was deleted and not recorded), the lease is free, and the same command run
    again with room finishes; the checkpoint validates throughout."""
    from checkpoint.cleanup import apply

    path = _aged(copy_of("join"))
    audit = small_disk / "audit"
    filled: list[Path] = []

    def fill(point: str, n: int) -> None:
        if point == "cleanup.deleted" and not filled:
            filled.append(_fill(small_disk, 0))

    monkeypatch.setattr(apply, "crash_point", fill)
    args = ["gc", str(path), "--query-stopped", "--retain-batches", "2", "--apply", "--batch-size", "10",
            "--grace", "0s", "--unsafe-short-grace", "--audit", str(audit)]  # fmt: skip
    assert ckpt_main(args) == 1
    err = capsys.readouterr().err
    assert "cleanup stopped" in err and "No space left" in err and err.strip().count("\n") == 0, err
    filled[0].unlink()
    monkeypatch.undo()
    assert _lease_is_free(path) and ckpt("validate", str(path)).returncode == 0
    assert ckpt_main([*args, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["failed"] == 0, again


def test_discovery_raises_when_a_folder_listing_hangs(copy_of, tmp_path, monkeypatch) -> None:
    """A folder whose listing never answers (a stalled mount): discovery raises in one line within
    the bound, so its checkpoints are not taken for vanished, and the hung thread holds nothing."""
    from checkpoint.errors import StorageError
    from checkpoint.model import find_checkpoints

    root = tmp_path / "root"
    (root / "team-a").mkdir(parents=True)
    shutil.move(str(copy_of("snapshots")), str(root / "team-b" / "q"))
    storage = Storage(str(root))
    real = Storage.list_dir

    def stalls(self, rel: str = ""):
        if rel == "team-a":
            time.sleep(3600)
        return real(self, rel)

    monkeypatch.setattr(Storage, "list_dir", stalls)
    started = time.monotonic()
    with pytest.raises(StorageError, match="team-a did not answer"):
        find_checkpoints(storage, timeout=0.5)
    assert time.monotonic() - started < 10


@pytest.mark.slow
def test_a_full_disk_during_a_migration_is_one_line_and_the_rerun_converges(
    spark, defaults, small_disk
) -> None:
    """DEST on a disk with 16 KiB left: `ckpt migrate` stops at a store's upload (exit 1, one line,
    DEST marked incomplete), both leases are free, and with room the same migration (in this
    session's Spark) finishes it."""
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from checkpoint.safety import AuditTrail, TwoSided, taken_at_once
    from checkpoint.storage import Storage
    from jobs.migrate import spark_ports
    from testbed.copying import copy_checkpoint

    src = _aged(copy_checkpoint(defaults["hdfs_agg"], small_disk.parent / "src"))
    dest = small_disk / "dest"
    filler = _fill(small_disk, 16 << 10)
    out = ckpt("migrate", str(src), str(dest), timeout=600)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    said = [line for line in out.stderr.splitlines() if line.startswith("ckpt: incomplete")]
    assert len(said) == 1 and "No space left" in said[0], out.stderr[-2000:]
    filler.unlink()
    assert _lease_is_free(src) and _lease_is_free(dest)
    audit = AuditTrail(str(small_disk.parent / "audit"))
    request = TwoSided(Storage(str(src)), Storage(str(dest)), taken_at_once("tests"), audit)
    assert migrate_checkpoint(request, MigrationOptions(spark_ports(lambda: spark))).proven
    assert ckpt("validate", str(dest)).returncode == 0


def test_a_read_only_destination_is_refused_in_one_line(copy_of, small_disk) -> None:
    """A fork onto a file system mounted read-only: its lease cannot be written, so the fork is
    refused before anything (exit 2, one line), and the source's lease is given back."""
    path = copy_of("snapshots")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    out = ckpt("fork", str(path), str(small_disk / "dest"))
    assert out.returncode == 2 and "Read-only file system" in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr, out.stderr
    assert _lease_is_free(path)


def test_an_immutable_candidate_fails_alone_and_the_rerun_converges(copy_of) -> None:
    """A candidate the file system refuses to delete (`chattr +i`): that file FAILED with why,
    the others deleted, exit 1; once it may go, the same command deletes it."""
    path = _aged(copy_of("join"))
    args = [
        "gc",
        str(path),
        "--query-stopped",
        "--retain-batches",
        "2",
        "--grace",
        "0s",
        "--unsafe-short-grace",
    ]
    planned = json.loads(ckpt(*args, "--candidates").stdout.splitlines()[1])["path"]
    if subprocess.run(["chattr", "+i", str(path / planned)], capture_output=True).returncode:
        pytest.skip("this file system keeps no immutable flag")
    try:
        out = ckpt(*args, "--apply", "--json")
        doc = json.loads(out.stdout)
        assert out.returncode == 1 and doc["failed"] == 1 and doc["deleted"] >= 1, doc
        assert doc["failures"][0]["path"] == planned and "not permitted" in doc["failures"][0]["why"], doc
    finally:
        subprocess.run(["chattr", "-i", str(path / planned)], check=True)
    again = json.loads(ckpt(*args, "--apply", "--json").stdout)
    assert again["failed"] == 0 and not (path / planned).exists(), again
