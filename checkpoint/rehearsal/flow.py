"""A restart rehearsal, whole: the scratch fork, the query run there by Spark (a port: in this
process, or in another Python with another PySpark), and the verdict. The original is only read,
and its lease is held only while the scratch is copied."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoint.analysis import Facts, Readiness, look_at, readiness_of, spark_line, validate
from checkpoint.errors import CheckpointError, UnknownSparkVersion
from checkpoint.format import FORMAT_VERSION_CONF
from checkpoint.model import load_head
from checkpoint.policy import POLICY
from checkpoint.rehearsal.scratch import Scratch, scratch_fork
from checkpoint.rehearsal.verdict import (
    Rehearsal,
    SparkError,
    StoreComparison,
    outcome_of,
    pinned_differences,
)
from checkpoint.safety import InPlace, TwoSided
from checkpoint.storage import Storage

log = logging.getLogger(__name__)

# Runs a job (`job_for`) under some Spark and gives back its answer (`jobs.rehearse`).
SparkRun = Callable[[dict[str, Any]], dict[str, Any]]


def job_for(scratch: Scratch, original: Storage, dest: Storage, query: str, conf: dict[str, str]) -> dict:
    """What Spark is asked, as plain values a child process reads from JSON."""
    return {
        "query": query,
        "original": original.spark_url,
        "scratch": dest.spark_url,
        "batch": scratch.batch,
        # The offsets do not pin the format: a deployment restarts a checkpoint in the one it was
        # written in (Spark 4.0 refuses a V1 commit log in a V2 session), unless `--conf` says else.
        "conf": {FORMAT_VERSION_CONF: str(scratch.format_version), **conf},
        "stores": [list(s) for s in scratch.stores],
        "reader_options": dict(scratch.reader_options),
        "inputs": list(scratch.inputs),
        "pinned": dict(scratch.pinned),
        # Spark's state data source reads with the session's confs, not the ones the offsets pin.
        "read_conf": {**scratch.pinned, FORMAT_VERSION_CONF: str(scratch.format_version)},
    }


@dataclass(frozen=True)
class RehearsalOptions:
    run: SparkRun  # how Spark runs the batch (`jobs.rehearse`: in this process, or another PySpark)
    query: str  # `module:function`, the query's code as it is to be restarted
    batch: int | None = None  # the batch replayed; default: the latest committed
    conf: dict[str, str] = field(default_factory=dict)  # confs the restart runs with
    keep: bool = False  # the scratch folder kept afterwards
    scratch_dir: str | None = None  # where the scratch folder is made; default: the system's temp
    workers: int = POLICY.fork_workers


def rehearse(request: InPlace, options: RehearsalOptions) -> Rehearsal:
    """Rehearses a restart of the query on the checkpoint behind `request` (read under its lease,
    never changed) at the options' batch, in a local scratch folder removed afterwards unless
    `keep`."""
    o = options
    src, take, run, query, batch, conf, keep, scratch_dir, workers = (
        request.storage,
        request.take,
        o.run,
        o.query,
        o.batch,
        o.conf,
        o.keep,
        o.scratch_dir,
        o.workers,
    )
    seconds: dict[str, float] = {}
    t = time.monotonic()
    if scratch_dir is not None:  # the user's choice of where: made as `mkdir -p` would
        Path(scratch_dir).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ckpt-rehearsal-", dir=scratch_dir))
    dest = Storage(str(folder / "checkpoint"))
    try:
        scratch = scratch_fork(TwoSided(src, dest, take), batch, workers=workers)
        facts = _facts(dest)
        seconds["fork"] = time.monotonic() - t
        t = time.monotonic()
        answer = run(job_for(scratch, src, dest, query, conf))
        seconds["spark"] = time.monotonic() - t
        return _verdict(scratch, dest, answer, keep, seconds, facts)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)  # this run's own folder, made above
        else:
            log.info("scratch kept at %s", dest.url)


def _facts(dest: Storage) -> Facts | None:
    """What the readiness rules read in the scratch before Spark runs: what the restart loads."""
    try:
        ckpt = load_head(dest, strict=False)
        checked = validate(ckpt)
    except CheckpointError as exc:
        log.warning("%s: the upgrade readiness rules could not read it: %s", dest.url, exc)
        return None
    return Facts.of(ckpt, checked.lineage, checked.snapshot_versions)


def _foreseen(facts: Facts | None, spark_version: str) -> Readiness | None:
    """What the readiness table says of this restart, for a Spark whose line it covers."""
    try:
        return None if facts is None else readiness_of(facts, spark_line(spark_version))
    except UnknownSparkVersion:  # a Spark the rules do not cover: the rehearsal is the only answer
        return None


def _verdict(
    scratch: Scratch, dest: Storage, answer: dict, keep: bool, seconds: dict[str, float], facts: Facts | None
) -> Rehearsal:
    error, compare_error = (SparkError.of(raw.get("condition"), raw.get("message", "")) if raw else None
                            for raw in (answer.get("error"), answer.get("compare_error")))  # fmt: skip
    stores = tuple(StoreComparison(**s) for s in answer.get("stores", []))
    committed = bool(answer.get("committed"))
    gone = [str(p) for p in answer.get("input_gone", [])]
    fraction = chain = None
    if committed:  # what the next restarts read: the lineage after the batch, as the fleet ranks it
        row = look_at("scratch", dest.url, None, POLICY, {})
        if row.problem is None:
            fraction, chain = round(row.max_lineage_header_fraction, 4), row.max_chain_length
        else:
            log.warning("%s: the lineage after the batch could not be read: %s", dest.url, row.problem)
    return Rehearsal(
        checkpoint=scratch.source,
        batch=scratch.batch,
        spark_version=str(answer.get("spark_version")),
        outcome=outcome_of(error, committed, stores, bool(gone), compare_error),
        error=error,
        compare_error=compare_error,
        input_gone=len(gone),
        input_gone_shown=tuple(gone[:3]),
        inputs=len(scratch.inputs),
        stores=stores,
        # No session conf when the query never started (its input gone): nothing to compare.
        pinned=pinned_differences(scratch.pinned, answer["session_conf"]) if "session_conf" in answer else (),
        max_header_fraction=fraction,
        max_chain_length=chain,
        scratch=dest.url,
        kept=keep,
        fork_files=scratch.fork.files + scratch.planned_files,
        fork_bytes=scratch.fork.total_bytes,
        seconds=seconds,
        foreseen=_foreseen(facts, str(answer.get("spark_version"))),
    )
