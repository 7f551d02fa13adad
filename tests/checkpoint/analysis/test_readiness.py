"""Upgrade readiness (`checkpoint.analysis.readiness`): every rule proven by a restart rehearsal under
the testbed's Spark generations, as `ckpt fleet --target-spark` reads it from the metadata alone; and
the rules on metadata that no generation writes (a foreign provider, unknown state variables)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest

from checkpoint.analysis import LINES, RULES, Facts, readiness_of, spark_line
from checkpoint.errors import UnknownSparkVersion
from checkpoint.format import JOIN_STATE_FORMAT_CONF, MERGE_OPERATOR_CONF, StateAction, state_format_of
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
    from testbed import jvm
    from testbed.cache import cache_home
    from testbed.generations import RELEASES, python_of

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
        version = RELEASES[proof.target]
        opts = jvm.for_version(os.environ.get("SPARK_SUBMIT_OPTS", ""), version)
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", opts)
        more = ["--python", str(python_of(cache_home(), version))]
    code, found = rehearsed(capsys, monkeypatch, checkpoint, scenario / "input", proof.query, *more)
    assert found["outcome"] == proof.outcome and code == (0 if proof.outcome == Outcome.EQUAL else 1), found
    assert found["foreseen"]["restarts"] == said["restarts"], found  # the rehearsal reads the same table
    if proof.outcome == Outcome.NOT_COMPARED:
        assert found["restarts"], found
    if proof.says:
        error = found["error"]
        assert proof.says in f"{error['condition']} {error['message']}", error
    assert files_of(checkpoint) == before


FOREIGN_V1 = state_format_of("com.example.Provider", 1)


def _facts(**changed) -> Facts:
    facts = {"refused": None, "pinned": {}, "operators": (), "snapshots": ()}  # format V2's: bases told
    return Facts(**{**facts, **changed})


@pytest.mark.unit
def test_what_no_generation_writes_fails_closed_or_cannot_be_told() -> None:
    merged = {MERGE_OPERATOR_CONF: "2"}
    unknown = _facts(pinned=merged, operators=(("transformWithStateExec", None),))
    assert readiness_of(unknown, "4.1").blockers[0].found.endswith("(state variables unknown)")
    values = {"stateVariables": [{"stateName": "seen", "stateVariableType": "ValueState"}]}
    values_only = _facts(pinned=merged, operators=(("transformWithStateExec", values),))
    assert readiness_of(values_only, "4.1").restarts
    # An operator without metadata may be the join.
    join_3 = {JOIN_STATE_FORMAT_CONF: "3"}
    assert not readiness_of(_facts(pinned=join_3, operators=((None, None),)), "4.0").restarts
    assert readiness_of(_facts(pinned=join_3, operators=(("stateStoreSave", None),)), "4.0").restarts
    foreign = readiness_of(_facts(refused=FOREIGN_V1.refusal(StateAction.READINESS)), "4.3")
    assert foreign.restarts is None and "com.example.Provider" in foreign.label
    unread = readiness_of(_facts(snapshots=(("0/0/default", None),)), "4.2")
    assert unread.restarts is None and "0/0/default" in unread.label
    # A store that cannot be told does not hide one that refuses.
    both = readiness_of(_facts(snapshots=(("0/0/default", None), ("0/1/default", 2))), "4.2")
    assert both.restarts is False and both.blockers[0].found.endswith("(first: 0/1/default)")
    on_4_0 = readiness_of(_facts(), "4.0")
    assert on_4_0.label == "yes, one way" and on_4_0.actions_refused == ("compact", "repartition")
    assert readiness_of(_facts(snapshots=None), "4.0").actions_refused == ("migrate",)  # format V1
    assert readiness_of(_facts(snapshots=None), "4.1").label == "yes"
    assert [spark_line(v) for v in ("4.1", "4.1.4", "4.3.0-preview2")] == ["4.1", "4.1", "4.3"]
    for bad in ("3.5", "4", "five", "4.4.0"):
        with pytest.raises(UnknownSparkVersion, match="cover Spark 4.0, 4.1, 4.2, 4.3"):
            spark_line(bad)
