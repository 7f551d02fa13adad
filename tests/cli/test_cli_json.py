"""The `--json` documents of every command keep their shape: the keys, and the kind of each value,
are compared with snapshots taken before the CLI was split into modules (and, for the commands
added since, when they were added). Scripts parse these
documents; a key renamed, dropped or turned from a number into a string breaks them.

Set CKPT_UPDATE_SNAPSHOTS=1 to rewrite the snapshots after a change to a shape that is meant.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli.main import main
from testbed.clock import date_to
from testbed.copying import copy_checkpoint

SNAPSHOTS = Path(__file__).parent / "snapshots" / "cli_json"


def shape(value):
    """Keys and kinds, not values: every element of a list merged into one shape."""
    if isinstance(value, dict):
        return {key: shape(v) for key, v in sorted(value.items())}
    if isinstance(value, list):
        merged: dict[str, object] = {}
        for item in value:
            merged[json.dumps(shape(item), sort_keys=True)] = shape(item)
        return [merged[k] for k in sorted(merged)]
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture
def place(corpus, tmp_path):
    def copy(name: str) -> Path:
        return copy_checkpoint(corpus[name], tmp_path / "root" / name / "checkpoint")

    return copy


def _commands(place, corpus, tmp_path) -> dict[str, list[str]]:
    chain, killed = place("long_chain"), place("killed_after_restart")
    date_to(tmp_path / "root", 8 * 3600)  # stopped, not dormant, however old the corpus

    def apart(name: str, again: bool = False) -> Path:  # outside the root that `scan` and `fleet` see
        where = tmp_path / "apart" / name
        return where if again else copy_checkpoint(corpus[name], where)

    return {
        "inspect": ["inspect", str(killed)],
        "lineage": ["lineage", str(chain)],
        "validate": ["validate", str(chain)],
        "scan": ["scan", str(tmp_path / "root")],
        "fleet": ["fleet", str(tmp_path / "root"), "--plan"],
        "fleet_target": ["fleet", str(tmp_path / "root"), "--no-cleanup-plan", "--target-spark", "4.1"],
        "gc": [
            "gc",
            str(killed),
            "--grace",
            "0s",
            "--unsafe-short-grace",
            "--quiet-period",
            "0s",
            "--unsafe-short-quiet-period",
            "--query-stopped",
        ],
        "gc_apply": [
            "gc",
            str(killed),
            "--apply",
            "--grace",
            "0s",
            "--unsafe-short-grace",
            "--quiet-period",
            "0s",
            "--unsafe-short-quiet-period",
        ],  # fmt: skip
        "fork": ["fork", str(killed), str(tmp_path / "fork")],
        "compact": ["compact", str(chain)],
        "state_profile": ["state-profile", str(apart("join")), "--candidates", "3,8"],
        "repartition": [
            "repartition",
            str(apart("snapshots")),
            "--partitions",
            "8",
            "--quiet-period",
            "0s",
            "--unsafe-short-quiet-period",
        ],
        "repartition_undo": ["repartition", str(apart("snapshots", again=True)), "--undo", "--query-stopped"],
        "purge_expired": [
            "purge-expired",
            str(apart("list_state")),
            "--quiet-period",
            "0s",
            "--unsafe-short-quiet-period",
        ],
    }


def test_every_command_keeps_its_json_shape(spark, place, corpus, tmp_path, capsys) -> None:
    update = os.environ.get("CKPT_UPDATE_SNAPSHOTS") == "1"
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    seen = {}
    for name, argv in _commands(place, corpus, tmp_path).items():
        code, doc = _run(capsys, *argv)
        seen[name] = (code, shape(doc))
        path = SNAPSHOTS / f"{name}.json"
        if update:
            path.write_text(json.dumps({"exit": code, "shape": shape(doc)}, indent=1, sort_keys=True) + "\n")
    for name, (code, got) in seen.items():
        want = json.loads((SNAPSHOTS / f"{name}.json").read_text())
        assert (code, got) == (want["exit"], want["shape"]), name


def test_the_shape_sees_a_renamed_key_and_a_changed_kind() -> None:
    doc = {"plan": {"files": 3, "by_reason": {"superseded": {"files": 1}}}, "deleted": [{"path": "a"}]}
    assert shape(doc) != shape({**doc, "plan": {"file": 3, "by_reason": {}}})
    assert shape(doc) != shape({**doc, "deleted": [{"path": 1}]})
    assert shape(doc) == shape({**doc, "deleted": [{"path": "b"}, {"path": "c"}]})
