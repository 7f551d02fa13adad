"""Retirement as the tests drive it: a dormant copy of a real checkpoint, `ckpt retire`'s plan and
apply, and the outcomes its trail recorded."""

from __future__ import annotations

import json
from pathlib import Path

from checkpoint.format import AUDIT_FOLDER
from checkpoint.safety import folder_name
from checkpoint.storage import Storage
from tests.support.cli import ckpt
from tests.support.copies import stopped_copy

DAY = 86400.0
SHORT = ("--grace", "1s", "--unsafe-short-grace")


def dormant_copy(corpus, name: str, root: Path, as_: str = "orders") -> Path:
    """The corpus' checkpoint `name` as `root/as_`, its query stopped nine days ago: dormant."""
    return stopped_copy(corpus[name], root / as_, 9 * DAY)


def plan(path: Path, *args: str) -> dict:
    """`ckpt retire`'s plan of the checkpoint at `path`, as its `--json` says it."""
    out = ckpt("retire", str(path), *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def apply(manifest: str, *args: str, env: dict[str, str] | None = None):
    """`ckpt retire --apply` of a plan's manifest: the finished process."""
    return ckpt("retire", "--apply", manifest, *args, "--json", env=env)


def outcomes(root: Path, checkpoint: Path, plan_id: str) -> list[dict]:
    """The steps the trail under `root` recorded of the plan `plan_id` of `checkpoint`."""
    trail = root / AUDIT_FOLDER / folder_name(Storage(str(checkpoint)).url)
    text = (trail / f"{plan_id}.retire-outcomes.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]
