"""The filesystem and the orchestrator are input too (docs/safety.md, "nothing outside a
checkpoint is read or deleted"): links swapped mid-action, FIFOs and devices where Spark writes a
file, a full disk, names made to forge a row. Each case is derived from a checkpoint a real query
wrote and run through the `ckpt` command or the core (the commands run in this process, with a
fault put where it bites: tests/cli/test_untrusted_fs.py; the sensor's and its cursor's cases:
tests/orchestration/test_untrusted_input.py)."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from checkpoint.safety import lease_for
from checkpoint.storage import Storage
from tests.support import damage
from tests.support.cli import CKPT, ckpt
from tests.support.damage import IN_THE_COMMIT_LOG
from tests.support.files import files_under
from tests.support.hostile import aged, fill, lease_is_free

# 1. Cleanup deletes only through the folders the plan saw


def test_a_checkpoint_folder_replaced_since_the_plan_is_not_gone_through(copy_of, tmp_path) -> None:
    """A plan holds the device and inode of each folder down to its partitions: a folder of the
    same name moved into place after the plan (not a link: the same names, the same files) is
    not the plan's, and nothing in it is deleted."""
    from checkpoint.safety import AuditTrail
    from tests.support.planning import apply_unleased, plan_of

    path = aged(copy_of("join"))
    storage = Storage(str(path))
    plan = plan_of(storage, AuditTrail(str(tmp_path / "audit")), grace_seconds=0, allow_short_grace=True,
                   retain_batches=2)  # fmt: skip
    assert plan.files > 0 and plan.folder_ids.get("state/0/0")
    copy = tmp_path / "state-0-0"
    shutil.copytree(path / "state/0/0", copy, symlinks=True)
    shutil.rmtree(path / "state/0/0")
    copy.rename(path / "state/0/0")
    kept = files_under(path / "state/0/0")
    result = apply_unleased(plan, storage, AuditTrail(str(tmp_path / "audit")))
    assert files_under(path / "state/0/0") == kept
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

    path = aged(copy_checkpoint(defaults["hdfs_agg"], tmp_path / "q"))
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
    assert lease_is_free(bad)


# 6. Faults never hide the answer or keep the lease


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
    path = aged(copy_of("killed_after_restart"))
    planned = json.loads(ckpt("fleet", str(path.parent), "--plan", "--json").stdout)["checkpoints"]
    assert planned[0]["reclaimable_bytes"], planned
    assert ckpt("gc", str(path), "--apply", "--query-stopped").returncode == 0
    after = json.loads(ckpt("fleet", str(path.parent), "--json").stdout)["checkpoints"]
    assert not after[0].get("reclaimable_bytes"), after


@pytest.mark.slow
def test_a_full_disk_during_a_compaction_fails_in_one_line_and_the_rerun_converges(
    ports, corpus, small_disk
) -> None:
    """`ckpt compact` on a disk with 24 KiB left: the stores whose publish meets ENOSPC are each
    reported with why (exit 1), never half published, the lease is given back and nothing
    committed is lost; with room again, the same compaction (in this session's Spark) compacts
    every store and the checkpoint validates."""

    from checkpoint.compaction import CompactionOptions, CompactionPlanOptions, compact_checkpoints
    from checkpoint.safety import EachInPlace, InPlace, taken_at_once
    from checkpoint.storage import Storage
    from testbed.copying import copy_checkpoint

    path = copy_checkpoint(corpus["long_chain"], small_disk / "q")
    cmd = [CKPT, "compact", str(path), "--master", "local[2]", "--min-chain", "1", "--json"]
    # 24 KiB: one store compacts; the others meet ENOSPC at an SST, their zip or its sidecar
    for leave in (24 << 10,):
        filler = fill(small_disk, leave)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
        failed = json.loads(out.stdout)["failed"]
        assert failed and all("No space left" in f["error"] for f in failed), failed
        # never half a publish: each zip there is has its sidecar (a zip without one is withdrawn)
        assert all(z.with_name(z.name + ".crc").exists() for z in path.glob("state/*/*/*.zip"))
        filler.unlink()
    assert lease_is_free(path)
    assert ckpt("validate", str(path)).returncode == 0
    options = CompactionOptions(ports.compaction, CompactionPlanOptions(min_chain=1, quiet_seconds=0))
    request = EachInPlace(["q"], lambda _: InPlace(Storage(str(path)), taken_at_once("tests")))
    again = compact_checkpoints(request, options)
    assert again.outcomes and all(o.ok for o in again.outcomes), [o.error for o in again.outcomes]
    assert set(again.chains_after["q"].values()) == {0}
    assert ckpt("validate", str(path)).returncode == 0


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
    ports, defaults, small_disk
) -> None:
    """DEST on a disk with 16 KiB left: `ckpt migrate` stops at a store's upload (exit 1, one line,
    DEST marked incomplete), both leases are free, and with room the same migration (in this
    session's Spark) finishes it."""
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from checkpoint.safety import AuditTrail, TwoSided, taken_at_once
    from checkpoint.storage import Storage
    from testbed.copying import copy_checkpoint

    src = aged(copy_checkpoint(defaults["hdfs_agg"], small_disk.parent / "src"))
    dest = small_disk / "dest"
    filler = fill(small_disk, 16 << 10)
    out = ckpt("migrate", str(src), str(dest), timeout=600)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    said = [line for line in out.stderr.splitlines() if line.startswith("ckpt: incomplete")]
    assert len(said) == 1 and "No space left" in said[0], out.stderr[-2000:]
    filler.unlink()
    assert lease_is_free(src) and lease_is_free(dest)
    audit = AuditTrail(str(small_disk.parent / "audit"))
    request = TwoSided(Storage(str(src)), Storage(str(dest)), taken_at_once("tests"), audit)
    assert migrate_checkpoint(request, MigrationOptions(ports.migration)).proven
    assert ckpt("validate", str(dest)).returncode == 0


def test_a_read_only_destination_is_refused_in_one_line(copy_of, small_disk) -> None:
    """A fork onto a file system mounted read-only: its lease cannot be written, so the fork is
    refused before anything (exit 2, one line), and the source's lease is given back."""
    path = copy_of("snapshots")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    out = ckpt("fork", str(path), str(small_disk / "dest"))
    assert out.returncode == 2 and "Read-only file system" in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr, out.stderr
    assert lease_is_free(path)


def test_an_immutable_candidate_fails_alone_and_the_rerun_converges(copy_of) -> None:
    """A candidate the file system refuses to delete (`chattr +i`): that file FAILED with why,
    the others deleted, exit 1; once it may go, the same command deletes it."""
    path = aged(copy_of("join"))
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
