"""The filesystem is input too, through the `ckpt` commands run in this process so a fault can be
put where it bites (the core's own cases: tests/checkpoint/storage/test_untrusted_fs.py): folders
swapped for links or gone during a cleanup's apply, a full disk at each write of a fork, a full
audit trail; each is one line, nothing outside the checkpoint is touched, and the lease is free
after."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

from cli.main import main as ckpt_main
from tests.support.cli import ckpt
from tests.support.files import files_under
from tests.support.hostile import aged, fill, lease_is_free


def test_a_folder_swapped_for_a_link_during_the_apply_deletes_nothing_outside(
    copy_of, tmp_path, monkeypatch, capsys
) -> None:
    """The issue's reproduction: `gc --apply --batch-size 1` on a stream-stream join, paused after
    its first delete while two partition folders are moved away and replaced by links to copies
    outside the root. Every file outside stays; what the links hid is reported FAILED, with why."""
    from checkpoint.cleanup import apply

    path = aged(copy_of("join"))
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
    before = {rel: files_under(tmp_path / f"moved-{rel.replace('/', '-')}") for rel in swapped}
    assert all(before.values()), "the swapped folders held files"
    for rel in swapped:
        assert files_under(outside / rel) == before[rel], f"files outside the root under {rel} were deleted"
    applied = doc
    assert applied["applied"] and applied["deleted"] >= 1 and applied["failed"] >= 1, applied
    assert code == 1
    whys = " ".join(applied["failed_why"])
    assert "plan saw a folder" in whys, applied["failed_why"]
    assert all(f["path"].startswith(tuple(swapped)) for f in applied["failures"]), applied["failures"]
    assert lease_is_free(path)


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
        assert lease_is_free(path) and lease_is_free(dest), k
        assert ckpt_main(["fork", str(path), str(dest)]) == 0, (k, capsys.readouterr().err)
    assert ckpt("validate", str(tmp_path / f"dest-{total}")).returncode == 0


def test_a_partition_folder_that_vanishes_during_the_apply_is_already_gone(
    copy_of, monkeypatch, capsys
) -> None:
    """Another cleanup (or a person) removes a partition folder while the apply runs: its files are
    SKIPPED as already gone, the others deleted, exit 0, and nothing is reported as deleted that
    this apply did not delete."""
    from checkpoint.cleanup import apply

    path = aged(copy_of("join"))
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


def test_a_full_audit_trail_stops_the_cleanup_in_one_line_and_the_rerun_converges(
    copy_of, small_disk, monkeypatch, capsys
) -> None:
    """The audit trail on a disk that fills after the first delete: the apply stops (exit 1, one
    line saying what was deleted and not recorded), the lease is free, and the same command run
    again with room finishes; the checkpoint validates throughout."""
    from checkpoint.cleanup import apply

    path = aged(copy_of("join"))
    audit = small_disk / "audit"
    filled: list[Path] = []

    def full_after_the_first_delete(point: str, n: int) -> None:
        if point == "cleanup.deleted" and not filled:
            filled.append(fill(small_disk, 0))

    monkeypatch.setattr(apply, "crash_point", full_after_the_first_delete)
    args = ["gc", str(path), "--query-stopped", "--retain-batches", "2", "--apply", "--batch-size", "10",
            "--grace", "0s", "--unsafe-short-grace", "--audit", str(audit)]  # fmt: skip
    assert ckpt_main(args) == 1
    err = capsys.readouterr().err
    assert "cleanup stopped" in err and "No space left" in err and err.strip().count("\n") == 0, err
    filled[0].unlink()
    monkeypatch.undo()
    assert lease_is_free(path) and ckpt("validate", str(path)).returncode == 0
    assert ckpt_main([*args, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["failed"] == 0, again
