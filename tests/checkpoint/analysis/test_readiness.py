"""Upgrade readiness (`checkpoint.analysis.readiness`) on metadata that no Spark generation writes: a
foreign provider, unknown state variables, an operator without metadata, snapshots that cannot be
told. Each rule proven by a rehearsal under the Spark it names: tests/cli/test_readiness.py."""

from __future__ import annotations

import pytest

from checkpoint.analysis import Facts, readiness_of, spark_line
from checkpoint.errors import UnknownSparkVersion
from checkpoint.format import JOIN_STATE_FORMAT_CONF, MERGE_OPERATOR_CONF, StateAction, state_format_of

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
