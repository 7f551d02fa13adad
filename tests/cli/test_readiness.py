"""Upgrade readiness (`checkpoint.analysis.readiness`) as `ckpt fleet --target-spark` reads it from
the metadata alone, every rule proven by a restart rehearsal (`ckpt rehearse`) under the testbed's
Spark generations. The rules on metadata no generation writes: tests/checkpoint/analysis/."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from checkpoint.analysis import LINES, RULES, spark_line
from checkpoint.rehearsal import Outcome
from cli.main import main
from testbed.copying import copy_checkpoint
from tests.support.files import files_of
from tests.support.generations import sources_moved_back
from tests.support.rehearsal import rehearsed


@dataclass(frozen=True)
class Proof:
    rule: str | None  # the rule that refuses it, or None: every rule lets it restart
    writer: str  # the release line that wrote it, `4.3` this suite's Spark; `defaults`: Spark's
    scenario: str
    query: str  # in tests.support.rehearsal
    target: str
    outcome: Outcome
    says: str = ""  # a part of what Spark says when it refuses


REFUSED, EQUAL, NOT_COMPARED = Outcome.SPARK_REFUSED, Outcome.EQUAL, Outcome.NOT_COMPARED
PROOFS = (
    # An upgrade and a rollback between 4.1 and 4.3 (docs/rehearse.md).
    Proof(None, "4.1", "long_chain", "aggregation", "4.3", EQUAL),
    Proof(None, "4.3", "long_chain", "aggregation", "4.1", EQUAL),
    Proof("snapshot-metadata-v2", "4.0", "join", "join", "4.3", REFUSED, "AUTO_SNAPSHOT_REPAIR_FAILED"),
    Proof(None, "4.0", "long_chain", "aggregation", "4.3", EQUAL),
    Proof("snapshot-metadata-v1", "4.3", "join", "join", "4.0", REFUSED, "Expected v2, but found v1"),
    # 4.0's state data source cannot read format V2: the restart is the proof.
    Proof(None, "4.3", "long_chain", "aggregation", "4.0", NOT_COMPARED),
    Proof("join-state-format-3", "4.3", "join_cf", "join", "4.0", REFUSED, "Valid versions are 1 and 2"),
    Proof("list-state-merge-v2", "4.3", "list_state", "list_state", "4.1", REFUSED, "PythonException"),
    Proof(None, "4.3", "list_state", "list_state", "4.2", EQUAL),
    Proof(None, "4.3 defaults", "hdfs_agg", "aggregation", "4.0", EQUAL),
)  # fmt: skip


@pytest.mark.unit
def test_every_rule_is_proven_by_a_refusal_under_a_line_it_names() -> None:
    for rule in RULES:
        assert [p for p in PROOFS if p.rule == rule.key and p.target in rule.refused_by], rule.key
    assert {p.target for p in PROOFS} <= set(LINES)


@pytest.mark.slow
@pytest.mark.parametrize("proof", PROOFS, ids=lambda p: f"{p.writer}-{p.scenario}-on-{p.target}")
def test_what_the_metadata_says_is_what_a_rehearsal_under_that_spark_finds(
    proof, spark, corpus, defaults, written_by, tmp_path, capsys, monkeypatch
) -> None:
    from testbed.cache import cache_home
    from testbed.generations import RELEASES, child_env, python_of

    # A copy of its own: a rehearsal holds the lease of what it rehearses while it copies.
    if proof.writer.startswith("4.3"):
        scenario = (defaults if proof.writer.endswith("defaults") else corpus)[proof.scenario].parent
    else:
        scenario = written_by(RELEASES[proof.writer]) / proof.scenario
    checkpoint = copy_checkpoint(scenario / "checkpoint", tmp_path / "checkpoint")
    sources_moved_back(checkpoint, scenario)
    before = files_of(checkpoint)

    capsys.readouterr()
    code = main(["fleet", str(checkpoint), "--target-spark", proof.target, "--no-cleanup-plan", "--json"])
    doc = json.loads(capsys.readouterr().out)
    [row] = doc["checkpoints"]
    said = row["readiness"]
    assert code == 0 and said["restarts"] == (proof.rule is None), said
    assert proof.rule is None or proof.rule in [b["rule"] for b in said["blockers"]], said
    refused = dict.fromkeys(said["actions_refused"], 1)
    assert doc["readiness"] == {"target": proof.target, "yes": int(proof.rule is None), "unknown": 0,
                                "no": int(proof.rule is not None), "actions_refused": refused}  # fmt: skip

    more: list[str] = []
    if proof.target != spark_line(spark.version):
        version, python = RELEASES[proof.target], python_of(cache_home(), RELEASES[proof.target])
        # The suite's JVM options as that Spark names them, with its own class archive, as the
        # restarts under it get them (the rehearsal's child inherits them).
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", child_env(version, python).get("SPARK_SUBMIT_OPTS", ""))
        more = ["--python", str(python)]
    code, found = rehearsed(capsys, monkeypatch, checkpoint, scenario / "input", proof.query, *more)
    assert found["outcome"] == proof.outcome and code == (0 if proof.outcome == Outcome.EQUAL else 1), found
    assert found["foreseen"]["restarts"] == said["restarts"], found  # the rehearsal reads the same table
    if proof.outcome == Outcome.NOT_COMPARED:
        assert found["restarts"], found
    if proof.says:
        error = found["error"]
        assert proof.says in f"{error['condition']} {error['message']}", error
    assert files_of(checkpoint) == before
