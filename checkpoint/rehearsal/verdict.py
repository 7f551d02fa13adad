"""What a rehearsal found, in plain words: the Spark error it met (its condition, cause and remedy),
the state store by store against the original's, the confs the checkpoint pins over the session's,
and the lineage headroom after the batch."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from checkpoint.analysis import Readiness

NEW_CHECKPOINT = "start the query on a new checkpoint (its state starts empty), or keep the old code"
_READINESS = "`ckpt fleet --target-spark VERSION` tells, docs/format.md"

# Spark's error conditions a restart meets (error-conditions.json of spark-common-utils): the cause in
# a user's words, and what to do. A condition not here is reported with Spark's own message.
CONDITIONS: dict[str, tuple[str, str]] = {
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE": (
        "the state's key (a grouping key, dedup columns, join keys) changed its columns or their types",
        f"keep the key's columns and types as the checkpoint records them; else {NEW_CHECKPOINT}",
    ),
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE": (
        "the state's value (the aggregates, or what the operator keeps per key) changed its columns or types",
        f"keep the aggregates as the checkpoint records them; else {NEW_CHECKPOINT}",
    ),
    "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION": (
        "a state variable's value changed in a way Avro's schema evolution cannot read",
        f"evolve the value only as Avro allows (add nullable fields); else {NEW_CHECKPOINT}",
    ),
    "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE": (
        "a transformWithState state variable changed its schema",
        f"keep the variable's schema, or give the new one another name; else {NEW_CHECKPOINT}",
    ),
    "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE": (
        "a transformWithState state variable changed its kind (ValueState, ListState, MapState)",
        f"keep its kind, or give the new variable another name; else {NEW_CHECKPOINT}",
    ),
    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART": (
        "transformWithState's output mode or time mode differs from the one the checkpoint records",
        f"keep the output mode and time mode the message names; else {NEW_CHECKPOINT}",
    ),
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA": (
        "a stateful operator was added, removed or replaced (aggregation, dedup, join, transformWithState)",
        f"keep the stateful operators and their order; else {NEW_CHECKPOINT}",
    ),
    "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY": (
        "the query has stateful operators and the checkpoint has no state for them",
        f"restore the state folder, or {NEW_CHECKPOINT}",
    ),
    "STREAM_STREAM_JOIN_INCOMPATIBLE_STATE_STORE_CONFIGS": (
        "the join's state format and the RocksDB merge operator version set here do not go together",
        "keep the confs the checkpoint was written with (they are pinned in its offsets)",
    ),
    "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION": (
        "the output mode is not one this query's operators support",
        "use the output mode the production query uses",
    ),
    "CANNOT_LOAD_STATE_STORE.CANNOT_READ_CHECKPOINT": (
        "a RocksDB snapshot's metadata is of a version this Spark does not read (format V2: Spark 4.0 "
        "writes and reads v2 only, 4.1 and later v1 only)",
        f"restart under the release line that wrote the snapshots ({_READINESS}); else {NEW_CHECKPOINT}",
    ),
    "CANNOT_LOAD_STATE_STORE.AUTO_SNAPSHOT_REPAIR_FAILED": (
        "no snapshot at the batch loads, nor an older one Spark could replay forward from: snapshots of "
        "another release line (format V2: 4.0 writes v2 metadata, 4.1 and later v1), or files missing",
        f"`ckpt validate` names missing files; {_READINESS} tells which Spark reads the snapshots",
    ),
    "CANNOT_LOAD_STATE_STORE": (
        "Spark could not load a state store at the batch: a file it needs is missing or unreadable",
        "run `ckpt validate`: it names the file; a fork of an earlier batch rolls back past it",
    ),
    "STDS_FAILED_TO_READ_STATE_SCHEMA": (
        "Spark cannot read the state schema this Spark expects (written by another release, or missing)",
        "rehearse under the Spark that wrote the checkpoint, or migrate it first",
    ),
}

# Conditions (and Java exceptions, for sources that raise no condition) that say the source no
# longer holds the batch's input: a fact about the source, not about the checkpoint or the code.
_INPUT_GONE = ("FAILED_READ_FILE.FILE_NOT_EXIST", "KAFKA_DATA_LOSS", "java.io.FileNotFoundException",
               "OffsetOutOfRangeException")  # fmt: skip

_WRAPPERS = ("STREAM_FAILED",)
_UNCATEGORIZED = ".UNCATEGORIZED"
_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]")


class Outcome(StrEnum):
    EQUAL = "equal"
    STATE_DIFFERS = "state differs"
    SPARK_REFUSED = "Spark refused the restart"
    INPUT_GONE = "the source no longer holds the batch's input"
    NOT_COMPARED = "restarts, but this Spark's state data source cannot read the state to compare"
    NOT_RUN = "the batch did not run"
    # The query's own code, behind the rehearsal's boundary (`jobs.rehearse`): what it did instead of
    # returning its writer.
    CODE_RAISED = "the query's function raised"
    CODE_EXITED = "the query's function called exit"
    CODE_STARTED = "the query's function started a query"
    TIMED_OUT = "the rehearsal ran past its time limit"


# The CLI's exit code of each outcome (docs/cli.md): 0 equal, 1 what Spark or the state answered,
# and one of its own for each thing the user's code did, so that a script can tell them apart.
EXIT_CODES = {
    Outcome.EQUAL: 0,
    Outcome.STATE_DIFFERS: 1, Outcome.SPARK_REFUSED: 1, Outcome.INPUT_GONE: 1, Outcome.NOT_COMPARED: 1,
    Outcome.NOT_RUN: 1,
    Outcome.CODE_RAISED: 3, Outcome.CODE_EXITED: 4, Outcome.CODE_STARTED: 5, Outcome.TIMED_OUT: 6,
}  # fmt: skip


@dataclass(frozen=True)
class CodeOutcome:
    """What the user's function did instead of returning its writer: raised (its type and message),
    called exit (its code), or started a query (refused, or stopped and named)."""

    outcome: str  # jobs.rehearse's CODE_RAISED, CODE_EXITED or CODE_STARTED
    type: str | None
    message: str


@dataclass(frozen=True)
class SparkError:
    condition: str | None
    message: str  # Spark's first line
    cause: str
    remedy: str

    @staticmethod
    def of(condition: str | None, message: str) -> SparkError:
        """The condition that says why: a query's failure (`STREAM_FAILED`) wraps the restart's own
        condition, which its message names in brackets, and `message` may go on with the causes;
        the first one this table knows wins, an uncategorized one only when no other is known."""
        named = [c for c in (condition, *_CONDITION.findall(message)) if c and c not in _WRAPPERS]
        knowns = [c for c in named if c in CONDITIONS or c.split(".")[0] in CONDITIONS]
        # An uncategorized load failure names its reason in a cause (the message's "Caused by:").
        known = next((c for c in knowns if not c.endswith(_UNCATEGORIZED)), next(iter(knowns), None))
        found = known or next(iter(named), condition)
        # From the condition's own words on: not the wrapper's query and run ids.
        start = message.find(f"[{found}]") if found else -1
        first = next((line.strip() for line in message[max(start, 0) :].splitlines() if line.strip()), "")
        if known is not None:
            cause, remedy = CONDITIONS.get(known) or CONDITIONS[known.split(".")[0]]
            return SparkError(found, first[:500], cause, remedy)
        return SparkError(found, first[:500], "Spark refused the restart (see its message)",
                          "see Spark's message")  # fmt: skip

    @property
    def input_gone(self) -> bool:
        return any(mark in (self.condition or "") or mark in self.message for mark in _INPUT_GONE)


@dataclass(frozen=True)
class StoreComparison:
    """One store at batch N, read by Spark's state data source on the original and on the scratch."""

    operator: int
    store: str
    original_rows: int
    rehearsal_rows: int
    only_original: int
    only_rehearsal: int
    keys: tuple[str, ...]  # a few keys whose rows differ, as JSON

    @property
    def equal(self) -> bool:
        return self.only_original == 0 and self.only_rehearsal == 0


@dataclass(frozen=True)
class PinnedConf:
    """A conf batch N's offsets pin with another value than the session's: Spark uses the pinned one."""

    key: str
    pinned: str
    session: str | None


def pinned_differences(pinned: dict[str, str], session: dict[str, str | None]) -> tuple[PinnedConf, ...]:
    return tuple(PinnedConf(k, v, session.get(k)) for k, v in sorted(pinned.items()) if session.get(k) != v)


@dataclass(frozen=True)
class Rehearsal:
    checkpoint: str
    batch: int
    spark_version: str
    outcome: Outcome
    error: SparkError | None
    compare_error: SparkError | None  # why the state could not be read after a replay that ran
    input_gone: int  # of the `inputs` files the batch's file sources read, how many are gone
    input_gone_shown: tuple[str, ...]
    inputs: int
    stores: tuple[StoreComparison, ...]
    pinned: tuple[PinnedConf, ...]
    max_header_fraction: float | None  # of the lineage header cap, after the batch
    max_chain_length: int | None
    scratch: str
    kept: bool
    fork_files: int
    fork_bytes: int
    seconds: dict[str, float]
    # What the upgrade readiness table says of a restart under this Spark, told before it ran.
    foreseen: Readiness | None = None
    code: CodeOutcome | None = None  # what the query's function did, when it did not return a writer
    timed_out: str | None = None  # what was running when the time limit passed
    stopped_queries: tuple[str, ...] = ()  # queries it left running, stopped by the rehearsal

    @property
    def passed(self) -> bool:
        return self.outcome == Outcome.EQUAL

    @property
    def restarts(self) -> bool:
        return self.outcome in (Outcome.EQUAL, Outcome.STATE_DIFFERS, Outcome.NOT_COMPARED)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def as_dict(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["outcome"] = str(self.outcome)
        doc["restarts"] = self.restarts
        doc["foreseen"] = None if self.foreseen is None else self.foreseen.as_dict()
        doc["seconds"] = {k: round(v, 2) for k, v in self.seconds.items()}
        return doc


_CODE_OUTCOMES = {"raised": Outcome.CODE_RAISED, "exited": Outcome.CODE_EXITED,
                  "started a query": Outcome.CODE_STARTED}  # fmt: skip


def outcome_of(
    error: SparkError | None,
    committed: bool,
    stores: tuple[StoreComparison, ...],
    input_gone: bool,
    compare_error: SparkError | None = None,
    code: CodeOutcome | None = None,
    timed_out: str | None = None,
) -> Outcome:
    if code is not None:
        return _CODE_OUTCOMES[code.outcome]
    if timed_out is not None:
        return Outcome.TIMED_OUT
    if input_gone:
        return Outcome.INPUT_GONE
    if error is not None:
        return Outcome.INPUT_GONE if error.input_gone else Outcome.SPARK_REFUSED
    if not committed:
        return Outcome.NOT_RUN
    if compare_error is not None:
        return Outcome.NOT_COMPARED
    return Outcome.EQUAL if all(s.equal for s in stores) else Outcome.STATE_DIFFERS
