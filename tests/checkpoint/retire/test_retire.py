"""Retirement of a dormant checkpoint through `ckpt retire`: plan, apply refused within the grace,
apply after it; refused on anything the plan did not see; killed at any moment and finished by the
same apply; and the archive restored with `ckpt fork`, its query restarted equal to an untouched
copy. Copies of real checkpoints, dated with `date_to` so no test depends on the corpus's age."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import pytest

from checkpoint.crash import CRASH_ENV
from checkpoint.format import AUDIT_FOLDER
from testbed.clock import date_to
from testbed.copying import copy_checkpoint
from testbed.corpus import scenario_named
from tests.support.cli import ckpt
from tests.support.leases import lapse_leases
from tests.support.retiring import DAY, SHORT, apply, dormant_copy, outcomes, plan
from tests.support.state import restart_like_untouched


def files_of(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def test_plan_then_apply_within_the_grace_refused_then_after_it_and_the_archive_restores_the_query(
    spark, corpus, corpus_root, tmp_path
) -> None:
    name = "snapshots"
    root = tmp_path / "root"
    orders = dormant_copy(corpus, name, root)
    untouched = tmp_path / "untouched"
    copy_checkpoint(corpus[name], untouched)
    before = files_of(orders)
    planned = plan(orders, "--archive", str(tmp_path / "archive" / "orders"))
    evidence = planned["evidence"]
    assert (planned["files"], planned["bytes"]) == (len(before), sum(before.values()))
    assert evidence["last_commit"] == evidence["last_offset"] is not None and evidence["dormant_since"]
    lines = Path(planned["manifest"]).read_text().splitlines()
    assert json.loads(lines[0])["type"] == "retirement" and len(lines) == 1 + len(before)
    assert [json.loads(line)["path"] for line in lines[1:]] == sorted(before)  # in order: the apply merges
    # the listing the plan paid for tells the fleet view what the dormant checkpoint holds
    fleet = json.loads(ckpt("fleet", str(root), "--no-cleanup-plan", "--json").stdout)["checkpoints"]
    assert (fleet[0]["files_held"], fleet[0]["bytes_held"]) == (len(before), sum(before.values()))

    early = apply(planned["manifest"])  # the default grace: 7 days
    assert early.returncode == 2 and "within its grace of 7d" in early.stderr
    floor = apply(planned["manifest"], "--grace", "1h")
    assert floor.returncode == 2 and "below the floor of 1d" in floor.stderr
    assert files_of(orders) == before and not (tmp_path / "archive").exists()

    time.sleep(1.1)
    done = apply(planned["manifest"], *SHORT)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["deleted_files"], doc["deleted_bytes"]) == (len(before), sum(before.values()))
    assert doc["archived_batch"] == evidence["last_commit"] and "ckpt retire --apply" in doc["approved_by"]
    assert not orders.exists() and (root / AUDIT_FOLDER).is_dir()  # the record stays
    steps = [o["step"] for o in outcomes(root, orders, planned["plan_id"])]
    assert steps == ["archived", "deleting", "deleted", "retired"]
    again = json.loads(apply(planned["manifest"], *SHORT).stdout)
    assert again["already_retired"] and again["deleted_files"] == 0

    restored = tmp_path / "restored"
    forked = ckpt("fork", str(tmp_path / "archive" / "orders"), str(restored))
    assert forked.returncode == 0, forked.stderr
    restart_like_untouched(
        spark, scenario_named(name), corpus_root / name, restored, untouched, tmp_path / "more", max_files=1
    )


def test_anything_the_plan_did_not_see_refuses_the_apply_and_deletes_nothing(corpus, tmp_path) -> None:
    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    planned = plan(orders, "--no-archive")
    time.sleep(1.1)
    commits = sorted((orders / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    newest = commits[-1]
    later = orders / "commits" / str(int(newest.name) + 1)

    shutil.copy(newest, later)  # a commit after the plan: the query ran again
    refused = apply(planned["manifest"], *SHORT)
    assert refused.returncode == 2 and f"commit {later.name} was written since the plan" in refused.stderr
    later.unlink()
    state = next((orders / "state").rglob("*.changelog"))
    kept = state.read_bytes()
    state.unlink()  # a file the plan listed is gone: something changed the checkpoint
    refused = apply(planned["manifest"], *SHORT)
    assert refused.returncode == 2 and "which the plan lists, is gone" in refused.stderr
    state.write_bytes(kept)  # back, but newer than the plan
    refused = apply(planned["manifest"], *SHORT)
    assert refused.returncode == 2 and "was written or changed since the plan" in refused.stderr
    assert orders.is_dir() and (orders / "metadata").exists()


def test_only_a_dormant_checkpoint_of_its_own_is_planned(corpus, tmp_path) -> None:
    root = tmp_path / "root"
    live = root / "live"
    copy_checkpoint(corpus["long_chain"], live)
    date_to(live, 3600)
    out = ckpt("retire", str(live), "--no-archive")
    assert out.returncode == 2 and "not dormant" in out.stderr
    killed = dormant_copy(corpus, "killed_before_restart", root, "killed")
    out = ckpt("retire", str(killed), "--no-archive")
    assert out.returncode == 2 and "stopped mid-batch" in out.stderr
    orders = dormant_copy(corpus, "long_chain", root)
    out = ckpt("retire", str(orders))
    assert out.returncode == 2 and "--no-archive" in out.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    out = ckpt("retire", str(orders), "--archive", str(tmp_path / "full"))
    assert out.returncode == 2 and "the archive is not empty" in out.stderr
    out = ckpt("retire", str(orders), "--archive", str(orders / "inside"))
    assert out.returncode == 2 and "overlap" in out.stderr
    nested = dormant_copy(corpus, "long_chain", orders, "nested")
    date_to(orders, 9 * DAY)
    out = ckpt("retire", str(orders), "--no-archive")
    assert out.returncode == 2 and "holds another checkpoint (nested)" in out.stderr
    shutil.rmtree(nested)
    # One kept in an operator's `_metadata` folder: its `metadata` passes for the operator's.
    shutil.copytree(corpus["long_chain"], orders / "state/0/_metadata", dirs_exist_ok=True)
    date_to(orders, 9 * DAY)
    out = ckpt("retire", str(orders), "--no-archive")
    assert out.returncode == 2 and "holds another checkpoint (state/0/_metadata)" in out.stderr
    shutil.rmtree(orders / "state/0/_metadata")
    # One whose `metadata` is gone: Spark restarts it from its logs, under a new id.
    inner = orders / "state/0/0/inner"
    shutil.copytree(corpus["long_chain"], inner)
    (inner / "metadata").unlink()
    date_to(orders, 9 * DAY)
    out = ckpt("retire", str(orders), "--no-archive")
    assert out.returncode == 2 and "holds another checkpoint (state/0/0/inner)" in out.stderr
    out = ckpt("retire", str(root), "--no-archive")  # the folder that holds them is no checkpoint
    assert out.returncode == 2 and "not a checkpoint" in out.stderr
    assert not (root / AUDIT_FOLDER).exists() or not list((root / AUDIT_FOLDER).rglob("*.retire.jsonl"))


def test_a_manifest_is_read_as_data(corpus, tmp_path) -> None:
    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    planned = plan(orders, "--no-archive")
    manifest = Path(planned["manifest"])
    moved = manifest.parent.parent / "elsewhere" / manifest.name
    moved.parent.mkdir()
    shutil.copy(manifest, moved)
    out = apply(str(moved), *SHORT)
    assert out.returncode == 2 and "not where its plan keeps it" in out.stderr
    text = manifest.read_text()
    for bad in ("x" * 70_000, "{}", json.dumps({**json.loads(text.splitlines()[0]), "files": "many"})):
        manifest.write_text(bad + "\n" + text.split("\n", 1)[1])
        out = apply(str(manifest), *SHORT)
        assert out.returncode == 2 and "Traceback" not in out.stderr
    head, rest = text.split("\n", 1)
    manifest.write_text(head + "\n" + json.dumps({"path": "../../outside", "bytes": 1, "mtime": 1.0}) + "\n"
                        + rest)  # fmt: skip
    time.sleep(1.1)
    out = apply(str(manifest), *SHORT)  # one line more than its header says
    assert out.returncode == 2 and "edited" in out.stderr
    assert files_of(orders)  # nothing deleted


@pytest.mark.parametrize("point", ["fork.after_step:1", "retire.archived", "retire.deleted:10"])
def test_killed_at_any_moment_the_same_apply_finishes_it(corpus, tmp_path, point) -> None:
    root = tmp_path / "root"
    orders = dormant_copy(corpus, "long_chain", root)
    archive = tmp_path / "archive"
    planned = plan(orders, "--archive", str(archive))
    time.sleep(1.1)
    args = (*SHORT, "--batch-size", "10", "--lease-ttl", "10m")
    died = apply(planned["manifest"], *args, env={CRASH_ENV: point})
    assert died.returncode == -signal.SIGKILL
    left = files_of(orders)
    assert (len(left) == planned["files"]) == (not point.startswith("retire.deleted"))
    refused = apply(planned["manifest"], *args)  # the killed run's lease is still held
    assert refused.returncode == 2 and "lease" in refused.stderr
    lapse_leases(root)
    done = apply(planned["manifest"], *args)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted_files"] == len(left) and not orders.exists()
    steps = [o["step"] for o in outcomes(root, orders, planned["plan_id"])]
    assert steps.count("archived") == 1 and steps.count("deleting") == 1 and steps[-1] == "retired"
    assert (
        sum(o["files"] for o in outcomes(root, orders, planned["plan_id"]) if o["step"] == "deleted")
        == (planned["files"])
    )
    assert ckpt("validate", str(archive)).returncode == 0
