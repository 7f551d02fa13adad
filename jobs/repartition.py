"""Repartitioning a stopped query's state with Spark's own repartitioner, made safe: preflight, a
backup, the rewrite, proof that every store holds the same rows where Spark's hash puts them, and
the way back. The rules are in `checkpoint/repartition/guards.py`; Spark does the rewrite, reads the
state (its state data source) and hashes the keys (its `hash`, the Murmur3 of HashPartitioning):
nothing of either is re-implemented here.

A repartition's records live in the audit trail, `<audit>/<checkpoint>/repartitions/<id>.*`:
`started.json` (preflight, backup, the digests before), `before.jsonl` (the files before) and
`finished.json` (the outcome). A started record with no finished one is an unfinished repartition:
the next run finishes it (Spark resumes its own batch) or takes it back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from checkpoint.analysis.validate import Severity, validate
from checkpoint.cleanup.audit import AuditTrail
from checkpoint.errors import CheckpointError, LeaseLost, RepartitionFailed, RepartitionRefused
from checkpoint.fork.copy import fork
from checkpoint.model.head import load_head
from checkpoint.policy import POLICY
from checkpoint.progress import Progress, report
from checkpoint.repartition.guards import (
    Before,
    Preflight,
    StateReader,
    is_repartition_batch,
    partition_count,
    preflight,
    refuse_if_live,
    skew,
    state_readers,
    undo,
)
from checkpoint.safety.naming import folder_name
from checkpoint.storage import Storage

from .spark_session import reach, scoped_confs

log = logging.getLogger(__name__)
_STEPS = 5  # preflight, backup, digests, rewrite, verification


@dataclass(frozen=True)
class RepartitionResult:
    checkpoint: str
    repartition_id: str
    outcome: str  # "repartitioned" | "undone"
    from_partitions: int
    to_partitions: int
    batch: int
    backup: str | None
    stores: list[dict[str, Any]]  # per store: rows, digest before and after, misplaced rows
    seconds: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# Spark: the state data source and Spark's hash


# With row tracking on, every put of a changelog replay reads its key first, to keep a row count
# that these reads never use (they count rows themselves): off while they run, the state data
# source's load costs half (2M keys: 11.1-12.4 s against 6.2-6.5 s, the same digests).
_FAST_READ = {"spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false"}


@contextmanager
def _state(spark, url: str, batch: int, reader: StateReader) -> Iterator[Any]:
    """The store's rows at `batch`, read one Spark partition per state partition, in order: a
    row's `spark_partition_id()` is the state partition it sits in. Act on them inside: the
    reader takes its confs at the load, and its tasks run at the action."""
    with scoped_confs(spark, _FAST_READ):
        load = spark.read.format("statestore").option("batchId", batch)
        for key, value in reader.options.items():
            load = load.option(key, value)
        yield load.load(url)


def _placed(partitions):
    """The partition Spark's HashPartitioning gives a row: Murmur3 (`hash`, seed 42) of the key
    its extractor took, modulo the count."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(F.col("partition_key")), partitions)


def digest_state(
    spark, url: str, batch: int, readers: list[StateReader], partitions: int
) -> list[dict[str, Any]]:
    """Per store, in one pass: how many rows (over every column family); a digest of their
    multiset, two 64-bit hashes of (column family, key bytes, value bytes) summed, so neither order
    nor placement counts and every byte does; and how many rows sit outside the partition Spark's
    hash gives them under `partitions`."""
    from pyspark.sql import functions as F

    out = []
    for reader in readers:
        row_cols = [F.col("column_family_name"), F.col("key_bytes"), F.col("value_bytes")]
        with _state(spark, url, batch, reader) as state:
            row = (
                state.withColumn(
                    "sits_in", F.spark_partition_id()
                )  # projected first: an aggregate takes no such input
                .agg(
                    F.count(F.lit(1)).alias("rows"),
                    F.coalesce(F.sum(F.xxhash64(*row_cols).cast("decimal(38,0)")), F.lit(0)).alias("a"),
                    F.coalesce(F.sum(F.hash(*row_cols).cast("decimal(38,0)")), F.lit(0)).alias("b"),
                    F.count(F.when(F.col("sits_in") != _placed(F.lit(partitions)), 1)).alias("misplaced"),
                )
                .first()
            )
        out.append({"operator": reader.operator, "store": reader.store, "rows": int(row["rows"]),
                    "digest": f"{row['a']}:{row['b']}", "misplaced": int(row["misplaced"])})  # fmt: skip
    return out


def rows_per_partition(
    spark, url: str, batch: int, reader: StateReader, counts: list[int]
) -> dict[int, dict[int, int]]:
    """For each partition count, the rows each partition would hold; under 0, where they sit now.
    One pass over the state: each row hashed once and placed under every count."""
    from pyspark.sql import functions as F

    with _state(spark, url, batch, reader) as state:
        placed = state.select(
            F.hash(F.col("partition_key")).alias("h"),
            F.spark_partition_id().alias("now"),
            F.explode(F.array(*[F.lit(n) for n in [0, *counts]])).alias("n"),
        )
        where = F.when(F.col("n") == 0, F.col("now")).otherwise(F.pmod(F.col("h"), F.col("n")))
        rows = placed.groupBy("n", where.alias("p")).count().collect()
    out: dict[int, dict[int, int]] = {n: dict.fromkeys(range(n), 0) for n in counts}
    out[0] = {}
    for r in rows:
        out[int(r["n"])][int(r["p"])] = int(r["count"])
    return out


# ------------------------------------------------------------------------------------------------
# The records in the audit trail


class Records:
    def __init__(self, audit: AuditTrail, checkpoint_url: str):
        self.audit = audit
        self.folder = f"{folder_name(checkpoint_url)}/repartitions"

    def rel(self, rid: str, what: str) -> str:
        return f"{self.folder}/{rid}.{what}"

    def url(self, rid: str, what: str) -> str:
        return f"{self.audit.url}/{self.rel(rid, what)}"

    def write(self, rid: str, what: str, doc: dict[str, Any]) -> None:
        self.audit.storage.write(
            self.rel(rid, what), json.dumps({"at": time.time(), **doc}, indent=1).encode()
        )

    def write_before(self, rid: str, before: Before) -> None:
        self.audit.storage.write(self.rel(rid, "before.jsonl"), before.data())

    def before(self, rid: str) -> Before:
        return Before.parse(
            self.audit.storage.read_bytes(self.rel(rid, "before.jsonl")), self.url(rid, "before")
        )

    def read(self, rid: str, what: str) -> dict[str, Any] | None:
        data = self.audit.storage.read_if_exists(self.rel(rid, what))
        return None if data is None else json.loads(data)

    def latest(self) -> dict[str, Any] | None:
        """The newest started repartition, with its finished record if any (`finished`)."""
        names = [f.rel.rsplit("/", 1)[1] for f in self.audit.storage.list_dir(self.folder).files]
        started = sorted(n[: -len(".started.json")] for n in names if n.endswith(".started.json"))
        if not started:
            return None
        rid = started[-1]
        doc = self.read(rid, "started.json")
        if doc is None:
            raise CheckpointError("a repartition record vanished while read", self.url(rid, "started.json"))
        return {**doc, "finished": self.read(rid, "finished.json"), "undone": self.read(rid, "undone.json")}


# ------------------------------------------------------------------------------------------------
# The guarded flow


def repartition(
    session: Callable[[], Any],
    storage: Storage,
    audit: AuditTrail,
    partitions: int,
    check: Callable[[], None] = lambda: None,
    now: float | None = None,
    quiet_seconds: float = POLICY.quiet_seconds,
    after_rewrite: Callable[[], None] | None = None,
) -> RepartitionResult:
    """Repartitions the stopped query at `storage` to `partitions` under the caller's lease
    (`check` raises once it is lost); `session` makes the SparkSession, once preflight passed.

    Refusals raise RepartitionRefused before anything is written; a failed rewrite or
    verification is undone and raises RepartitionFailed. `after_rewrite` runs between Spark's
    rewrite and the verification (tests damage a file there)."""
    now = time.time() if now is None else now
    records = Records(audit, storage.url)
    seconds: dict[str, float] = {}
    t = time.monotonic()
    ckpt = load_head(storage, recent=2)
    last = records.latest()
    unfinished = last if last is not None and last["finished"] is None else None
    if unfinished is not None and unfinished["to_partitions"] != partitions:
        raise RepartitionRefused(
            f"repartition {unfinished['repartition_id']} to {unfinished['to_partitions']} partitions did not "
            f"finish: run it again with --partitions {unfinished['to_partitions']}, or --undo",
            storage.url,
        )
    if unfinished is not None and ckpt.latest_committed_batch == unfinished["batch"]:
        # Killed after Spark committed and before the proof: prove it now.
        refuse_if_live(ckpt, now, quiet_seconds, own_batch=unfinished["batch"])
        pre = Preflight(**unfinished["preflight"])
    else:
        pre = preflight(ckpt, partitions, now, quiet_seconds)
    report(log, Progress("repartition steps", 1, _STEPS), "%s: %d -> %d partitions, batch %d", storage.url,
           pre.from_partitions, pre.to_partitions, pre.batch)  # fmt: skip
    readers = state_readers(ckpt)
    spark = session()
    reach(spark, storage)
    seconds["preflight"] = time.monotonic() - t
    if unfinished is not None:
        rid, before_digests, backup = (
            unfinished["repartition_id"],
            unfinished["digests"],
            unfinished["backup"],
        )
        before = records.before(rid)
        log.info("%s: finishing repartition %s", storage.url, rid)
    else:
        rid = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{pre.latest_batch}"
        t = time.monotonic()
        before = Before.take(storage)
        records.write_before(rid, before)
        backup_storage = audit.storage.child(records.rel(rid, "backup"))
        backup = backup_storage.url
        # Hard links where the audit trail shares the checkpoint's local file system: the backup
        # then costs no copy of the state, which Spark never rewrites in place.
        forked = fork(storage, backup_storage, pre.latest_batch, check=check, link=True)
        seconds["backup"] = time.monotonic() - t
        report(log, Progress("repartition steps", 2, _STEPS), "%s: backup fork at batch %d in %s "
               "(%d files, %d hard-linked)", storage.url, pre.latest_batch, backup, forked.files,
               forked.linked_files)  # fmt: skip
        t = time.monotonic()
        try:
            before_digests = digest_state(
                spark, storage.spark_url, pre.latest_batch, readers, pre.from_partitions
            )
        except Exception as exc:  # Spark fails with Py4J and analysis errors, not CheckpointErrors
            raise RepartitionRefused(f"Spark cannot read the state: {_first_line(exc)}", storage.url) from exc
        off = next((d for d in before_digests if d["misplaced"]), None)
        if off is not None:  # nothing of the checkpoint is written yet; the backup stays in the audit trail
            raise RepartitionRefused(
                f"operator {off['operator']} store {off['store']}: {off['misplaced']} rows sit outside the "
                "partition Spark's hash gives their key: this state is not partitioned as Spark's "
                "repartitioner assumes (a checkpoint from before Spark 3.3?)",
                storage.url,
            )
        records.write(rid, "started.json", {"repartition_id": rid, "checkpoint": storage.url,
                                            "preflight": pre.as_dict(), "batch": pre.batch,
                                            "to_partitions": partitions, "backup": backup,
                                            "backup_linked_files": forked.linked_files,
                                            "digests": before_digests})  # fmt: skip
        seconds["digest_before"] = time.monotonic() - t
    report(log, Progress("repartition steps", 3, _STEPS), "%s: %d stores digested", storage.url, len(readers))

    def fail(reason: str) -> RepartitionFailed:
        undone = undo(storage, before)
        records.write(rid, "finished.json", {"outcome": "undone", "reason": reason, "deleted": len(undone)})
        log.error("%s: repartition undone (%d files deleted): %s", storage.url, len(undone), reason)
        return RepartitionFailed(f"{reason}; the checkpoint is as it was before", storage.url)

    try:
        check()
        t = time.monotonic()
        if ckpt.latest_committed_batch != pre.batch:  # a killed run's batch Spark committed: proven below
            spark._streamingCheckpointManager.repartition(storage.spark_url, partitions)
        seconds["rewrite"] = time.monotonic() - t
        report(log, Progress("repartition steps", 4, _STEPS), "%s: Spark rewrote the state in %.1f s",
               storage.url, seconds["rewrite"])  # fmt: skip
        if after_rewrite is not None:
            after_rewrite()
        check()
        t = time.monotonic()
        stores = _verify(spark, storage, pre, readers, before_digests)
        seconds["verify"] = time.monotonic() - t
    except _Mismatch as exc:
        raise fail(str(exc)) from exc
    except LeaseLost:  # another holder may act now: this run touches nothing more
        raise
    except CheckpointError as exc:
        raise fail(f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # Spark's failure (a Py4J or analysis error): put the checkpoint back
        raise fail(f"Spark's rewrite failed: {_first_line(exc)}") from exc
    result = RepartitionResult(storage.url, rid, "repartitioned", pre.from_partitions, pre.to_partitions,
                               pre.batch, backup, stores, seconds)  # fmt: skip
    records.write(rid, "finished.json", {"outcome": "repartitioned", **result.as_dict()})
    report(log, Progress("repartition steps", 5, _STEPS), "%s: verified %d stores", storage.url, len(stores))
    return result


class _Mismatch(Exception):
    pass


def _first_line(exc: BaseException) -> str:
    """A Spark error's class and first line: its JVM stack trace is for the log, not the message."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def _verify(
    spark, storage: Storage, pre: Preflight, readers: list[StateReader], before: list[dict]
) -> list[dict]:
    after_ckpt = load_head(storage, recent=1)
    if after_ckpt.latest_committed_batch != pre.batch or not is_repartition_batch(after_ckpt, pre.batch):
        raise _Mismatch(f"Spark did not commit repartition batch {pre.batch}")
    if partition_count(after_ckpt, pre.batch) != pre.to_partitions:
        raise _Mismatch(f"batch {pre.batch} does not have {pre.to_partitions} partitions")
    errors = [f for f in validate(after_ckpt).findings if f.severity == Severity.ERROR]
    if errors:
        raise _Mismatch(
            "validation after the rewrite: " + "; ".join(f"{f.code} {f.message}" for f in errors[:3])
        )
    after = digest_state(spark, storage.spark_url, pre.batch, readers, pre.to_partitions)
    stores = []
    for b, a in zip(before, after, strict=True):
        where = f"operator {a['operator']} store {a['store']}"
        if (b["rows"], b["digest"]) != (a["rows"], a["digest"]):
            raise _Mismatch(f"{where}: {b['rows']} rows before, {a['rows']} after, digests {b['digest']} and "
                            f"{a['digest']}")  # fmt: skip
        if a["misplaced"]:
            raise _Mismatch(f"{where}: {a['misplaced']} rows outside the partition Spark's hash gives them "
                            f"under {pre.to_partitions}")  # fmt: skip
        stores.append({"operator": a["operator"], "store": a["store"], "rows": a["rows"], "misplaced": 0,
                       "digest_before": b["digest"], "digest_after": a["digest"]})  # fmt: skip
    return stores


def undo_repartition(
    storage: Storage,
    audit: AuditTrail,
    check: Callable[[], None] = lambda: None,
    *,
    quiet_seconds: float = POLICY.quiet_seconds,
    query_stopped: bool = False,
    now: float | None = None,
) -> dict[str, Any]:
    """`--undo`: takes back the newest repartition while its batch is still the checkpoint's latest,
    and the query is not running. A query restarted after the repartition and idle since holds
    the next batch in its driver: undoing under it breaks that batch. So the undo waits for the
    repartition's own batch to be older than the quiet period, unless the caller knows the query
    is stopped (`query_stopped`)."""
    records = Records(audit, storage.url)
    last = records.latest()
    if last is None:
        raise RepartitionRefused("no repartition of this checkpoint in the audit trail", storage.url)
    if last["undone"] is not None or (last["finished"] or {}).get("outcome") == "undone":
        raise RepartitionRefused(f"repartition {last['repartition_id']} was already undone", storage.url)
    ckpt = load_head(storage, recent=1)
    now = time.time() if now is None else now
    if not query_stopped and ckpt.is_live(now, quiet_seconds):
        raise RepartitionRefused(
            f"repartition batch {last['batch']} is newer than the quiet period ({quiet_seconds:.0f} s): a "
            "query restarted since may be running and would break on its next batch. Stop it and wait, or "
            "pass --query-stopped if it is stopped",
            storage.url,
        )
    latest = max(b for b in (ckpt.latest_planned_batch, ckpt.latest_committed_batch) if b is not None)
    if latest > last["batch"]:
        raise RepartitionRefused(
            f"the query ran batch {latest} after repartition batch {last['batch']}: undoing it now would "
            f"lose that progress (the backup fork at batch {last['preflight']['latest_batch']} is "
            f"{last['backup']})",
            storage.url,
        )
    check()
    deleted = undo(storage, records.before(last["repartition_id"]))
    doc = {"outcome": "undone", "reason": "undone on request", "deleted": len(deleted)}
    records.write(last["repartition_id"], "undone.json", doc)
    return {"checkpoint": storage.url, "repartition_id": last["repartition_id"], **doc}


def predict(spark, ckpt, candidates: list[int]) -> list[dict[str, Any]]:
    """Per store: the rows (every column family) each partition would hold under each candidate
    count, and a self-check: under the current count every row must be placed where it sits, or
    the keys are not hashed as Spark's repartitioner assumes (a checkpoint from before Spark 3.3
    may not be) and repartitioning it is unsafe."""
    batch = ckpt.latest_committed_batch
    current = partition_count(ckpt, batch)
    reach(spark, ckpt.storage)
    out = []
    for reader in state_readers(ckpt):
        t = time.monotonic()
        counts = rows_per_partition(
            spark, ckpt.storage.spark_url, batch, reader, sorted({current, *candidates})
        )
        now = [counts[0].get(p, 0) for p in range(current)]
        off = [p for p in range(current) if counts[current][p] != now[p]]
        out.append({
            "operator": reader.operator,
            "store": reader.store,
            "rows": sum(now),
            "now": now,
            "candidates": {str(n): {"rows": [counts[n][p] for p in range(n)],
                                    "skew": skew([counts[n][p] for p in range(n)])} for n in candidates},
            "self_check": {"ok": not off, "partitions_off": off},
            "seconds": round(time.monotonic() - t, 3),
        })  # fmt: skip
    return out
