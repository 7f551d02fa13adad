"""Upgrade readiness: whether another Spark can restart a checkpoint, told from its metadata alone.

Each rule is a fact some release writes into a checkpoint and some other release refuses. Every
rule was found, and is proven, by a restart rehearsal under the testbed's Spark generations
(`tests/cli/test_readiness.py`); docs/format.md shows the table (`python -m
testbed.docs`). A rule reads only what the fleet's head-first look has read anyway: the latest
offsets' pinned confs, the operator metadata, and the metadata line of each snapshot the latest
lineages start from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint.errors import UnknownSparkVersion
from checkpoint.format import JOIN_STATE_FORMAT_CONF, MERGE_OPERATOR_CONF, StateAction
from checkpoint.model import Checkpoint, StoreLineage

# The Spark release lines the rules cover: the ones the project runs and proves under.
LINES = ("4.0", "4.1", "4.2", "4.3")
_JOIN = "symmetricHashJoin"
_TWS = "transformWithState"


def spark_line(version: str) -> str:
    """`4.1`, `4.1.4` or `4.1.0-preview` as the release line the rules name (`4.1`)."""
    line = ".".join(version.strip().split("-")[0].split(".")[:2])
    if line not in LINES:
        covered = ", ".join(LINES)
        raise UnknownSparkVersion(f"Spark {version[:40]!r}: the readiness rules cover Spark {covered}")
    return line


@dataclass(frozen=True)
class Facts:
    """What a checkpoint's metadata says, once, for every target."""

    refused: str | None  # why nothing can be told (a provider not Spark's), or None
    pinned: Mapping[str, str]  # the latest planned batch's offsets conf
    operators: tuple[tuple[str | None, Any], ...]  # (name, operatorPropertiesJson) of each operator
    # (store, metadata version) of each base zip, where the format's readers care which Spark
    # wrote it (V2); None where any Spark 4.x writes what this release writes.
    snapshots: tuple[tuple[str, int | None], ...] | None

    @staticmethod
    def of(ckpt: Checkpoint, lineage: Sequence[StoreLineage], snapshot_versions: Mapping[str, int]) -> Facts:
        latest = ckpt.latest_planned_batch
        offset = None if latest is None else ckpt.batches[latest].offset
        bases = ckpt.states.writer(lambda: [(e.store.label, e.base.rel) for e in lineage if e.base])
        return Facts(
            refused=ckpt.states.refusal(StateAction.READINESS),
            pinned=dict(offset.conf) if offset is not None else {},
            operators=tuple(
                (op.name, op.metadata.properties if op.metadata else None) for op in ckpt.operators.values()
            ),  # fmt: skip
            snapshots=None
            if bases is None
            else tuple((store, snapshot_versions.get(rel)) for store, rel in bases),
        )


def _snapshots_of(version: int) -> Callable[[Facts], str | None]:
    def found(facts: Facts) -> str | None:
        bases = facts.snapshots or ()
        stores = [store for store, v in bases if v == version]
        if not stores:
            return None
        return f"{len(stores)} of {len(bases)} stores start from one (first: {stores[0]})"

    return found


def _join_format_3(facts: Facts) -> str | None:
    if facts.pinned.get(JOIN_STATE_FORMAT_CONF) != "3":
        return None
    # An operator without metadata might be the join: it counts as one (fail closed).
    joins = [name for name, _ in facts.operators if name is None or name == _JOIN]
    return f"{JOIN_STATE_FORMAT_CONF}=3 and {len(joins)} join operator(s)" if joins else None


def _list_state_merged(facts: Facts) -> str | None:
    if facts.pinned.get(MERGE_OPERATOR_CONF, "1") == "1":
        return None
    lists = []
    for name, properties in facts.operators:
        if name is None or not name.startswith(_TWS):
            continue
        variables = (properties or {}).get("stateVariables")
        if not isinstance(variables, list):  # what it keeps is unknown: it counts (fail closed)
            lists.append(f"{name} (state variables unknown)")
            continue
        lists += [str(v.get("stateName")) for v in variables
                  if isinstance(v, dict) and v.get("stateVariableType") == "ListState"]  # fmt: skip
    if not lists:
        return None
    return f"{MERGE_OPERATOR_CONF}={facts.pinned[MERGE_OPERATOR_CONF]}, ListState {', '.join(lists[:3])}"


@dataclass(frozen=True)
class Rule:
    """A fact of the metadata that the Spark lines of `refused_by` cannot restart."""

    key: str
    shows: str  # what the metadata shows, in words
    refused_by: tuple[str, ...]
    spark_says: str
    remedy: str
    proof: str  # what the rehearsals under the testbed's generations showed
    found: Callable[[Facts], str | None]  # where the checkpoint shows it, or None


RULES: tuple[Rule, ...] = (
    Rule("snapshot-metadata-v2",
         "a format V2 store starts from a snapshot whose metadata is `v2` (Spark 4.0 wrote it)",
         ("4.1", "4.2", "4.3"),
         "`CANNOT_LOAD_STATE_STORE.CANNOT_READ_CHECKPOINT` (\"Expected v1, but found v2\"); 4.3 with "
         "changelog checkpointing tries older snapshots first and fails with `AUTO_SNAPSHOT_REPAIR_FAILED`",
         "stay on 4.0, or start a new checkpoint; a store on changelogs only (no snapshot yet) upgrades",
         "a join on snapshots 4.0.5 wrote is refused by 4.3; an aggregation on changelogs only that 4.0.5 "
         "wrote restarts under 4.3 with equal state",
         _snapshots_of(2)),
    Rule("snapshot-metadata-v1",
         "a format V2 store starts from a snapshot whose metadata is `v1` (Spark 4.1 or later wrote it)",
         ("4.0",),
         "`CANNOT_LOAD_STATE_STORE.CANNOT_READ_CHECKPOINT` (\"Expected v2, but found v1\")",
         "stay on 4.1 or later; a rollback to 4.0 needs a new checkpoint",
         "a join on snapshots 4.3 wrote is refused by 4.0.5; an aggregation on changelogs only that 4.3 "
         "wrote restarts under 4.0.5",
         _snapshots_of(1)),
    Rule("join-state-format-3",
         f"the offsets pin `{JOIN_STATE_FORMAT_CONF}=3` for a stream-stream join (column families)",
         ("4.0",),
         "\"'3' in spark.sql.streaming.join.stateFormatVersion is invalid. Valid versions are 1 and 2\"",
         "stay on 4.1 or later; a rollback to 4.0 needs a new checkpoint",
         "a join in state format 3 that 4.3 wrote is refused by 4.0.5, restarts under 4.1.4 (whose state "
         "reader cannot read its schema, so the state is not compared) and restarts equal under 4.2.1",
         _join_format_3),
    Rule("list-state-merge-v2",
         f"the offsets pin `{MERGE_OPERATOR_CONF}=2` (Spark 4.2 and later) and transformWithState keeps a "
         "ListState",
         ("4.0", "4.1"),
         "the state server cannot read the list it loads (`INTERNAL_ERROR`: \"Invalid byte array backed "
         "UnsafeRow\"), and the query fails in its Python worker",
         "stay on 4.2 or later; a rollback needs a new checkpoint",
         "a ListState that 4.3 wrote is refused by 4.1.4 and restarts equal under 4.2.1; one that 4.1.4 "
         "wrote restarts equal under 4.3",
         _list_state_merged),
)  # fmt: skip

# Format V1 (both providers) and V2 on changelogs only, as the rules find nothing in them.
NO_RULE_PROOF = ("an aggregation on the HDFS-backed store and one on RocksDB format V1 that 4.3 wrote "
                 "restart equal under 4.0.5; an aggregation 4.1.4 wrote restarts equal under 4.3 and "
                 "back")  # fmt: skip
# What a restart under 4.0 does to a format V2 checkpoint: the snapshots 4.0 writes from then on
# carry metadata v2, which no later Spark reads (`snapshot-metadata-v2`).
ONE_WAY = "one way: the snapshots 4.0 writes from then on are refused by 4.1 and later"


@dataclass(frozen=True)
class Blocker:
    rule: str
    found: str


@dataclass(frozen=True)
class Readiness:
    """Whether Spark `target` restarts the checkpoint, and what this project would refuse there."""

    target: str
    restarts: bool | None  # None: the metadata cannot tell (`unknown` says why)
    blockers: tuple[Blocker, ...] = ()
    unknown: str | None = None
    caveat: str | None = None
    actions_refused: tuple[str, ...] = ()  # maintenance actions whose writing `target` would not read

    @property
    def label(self) -> str:
        if self.restarts is None:
            return f"unknown: {self.unknown}"
        if not self.restarts:
            return "no: " + ", ".join(b.rule for b in self.blockers)
        return "yes, one way" if self.caveat else "yes"

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "label": self.label,
            "restarts": self.restarts,
            "blockers": [{"rule": b.rule, "found": b.found} for b in self.blockers],
            "unknown": self.unknown,
            "caveat": self.caveat,
            "actions_refused": list(self.actions_refused),
        }


def readiness_of(facts: Facts, target: str) -> Readiness:
    """The rules of `RULES` that `facts` shows and `target` (a line of `LINES`) refuses."""
    if facts.refused is not None:
        return Readiness(target, None, unknown=facts.refused)
    refused = _actions_refused(facts, target)
    unread = [store for store, version in facts.snapshots or () if version is None]
    shown = ((r, r.found(facts)) for r in RULES if target in r.refused_by)
    blockers = tuple(Blocker(r.key, found) for r, found in shown if found)
    if blockers:
        return Readiness(target, False, blockers, actions_refused=refused)
    if unread:
        return Readiness(target, None, unknown=f"the snapshot metadata of {unread[0]} could not be read",
                         actions_refused=refused)  # fmt: skip
    # What this release writes into a format whose readers care about the writer, 4.0 refuses.
    caveat = ONE_WAY if target == "4.0" and facts.snapshots is not None else None
    return Readiness(target, True, caveat=caveat, actions_refused=refused)


def _actions_refused(facts: Facts, target: str) -> tuple[str, ...]:
    """What this project writes in Spark's formats with its own Spark (4.3): snapshots carrying
    metadata v1, which 4.0 refuses in format V2. Compaction and repartition of a V2 checkpoint refuse
    such a store already (`analysis.generation`); a migration's output is V2."""
    if target != "4.0":
        return ()
    return ("compact", "repartition") if facts.snapshots is not None else ("migrate",)
