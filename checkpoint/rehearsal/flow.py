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

from checkpoint import bounds
from checkpoint.analysis import Facts, Readiness, readiness_of, spark_line, validate
from checkpoint.errors import CheckpointError, RehearsalRefused, UnknownSparkVersion
from checkpoint.format import FORMAT_VERSION_CONF
from checkpoint.model import load_head
from checkpoint.policy import POLICY
from checkpoint.rehearsal.scratch import Scratch, scratch_fork
from checkpoint.rehearsal.verdict import (
    CodeOutcome,
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


def job_for(
    scratch: Scratch, original: Storage, dest: Storage, query: str, conf: dict[str, str], timeout: float
) -> dict:
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
        "timeout": timeout,
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
    # How long the query's function, the batch and the comparison may take in all; past it, the
    # outcome says so and the scratch is removed (a function that hangs is left on its thread).
    timeout_seconds: float = POLICY.rehearsal_timeout_seconds


def rehearse(request: InPlace, options: RehearsalOptions) -> Rehearsal:
    """Rehearses a restart of the query on the checkpoint behind `request` (read under its lease,
    never changed) at the options' batch, in a local scratch folder removed afterwards unless
    `keep`."""
    o = options
    src = request.storage
    seconds: dict[str, float] = {}
    t = time.monotonic()
    try:
        bounds.seconds(o.timeout_seconds, "the time limit", low=1.0)
    except bounds.OutOfRange as exc:
        raise RehearsalRefused(f"{exc}: nothing was made", src.url) from exc
    where = Path(o.scratch_dir if o.scratch_dir is not None else tempfile.gettempdir())
    # By place, before anything is made: a scratch folder inside the checkpoint (or through a link
    # into it) would write into what it copies.
    request.refuse_inside(Storage(str(where)), "the scratch folder")
    made: list[Path] = []
    try:
        if o.scratch_dir is not None:
            _mkdir_p(where, made)
        folder = Path(tempfile.mkdtemp(prefix="ckpt-rehearsal-", dir=where))
    except OSError as exc:  # a file in the way, a dangling link, a read-only or full disk
        _unmake(made)
        raise RehearsalRefused(f"the scratch folder cannot be made there ({exc.strerror or exc}): nothing "
                               "was made", str(where)) from exc  # fmt: skip
    dest = Storage(str(folder / "checkpoint"))
    done = False
    try:
        scratch = scratch_fork(TwoSided(src, dest, request.take), o.batch, workers=o.workers)
        facts = _facts(dest)
        seconds["fork"] = time.monotonic() - t
        t = time.monotonic()
        answer = o.run(job_for(scratch, src, dest, o.query, o.conf, o.timeout_seconds))
        seconds["spark"] = time.monotonic() - t
        verdict = _verdict(scratch, answer, o.keep, seconds, facts, dest)
        done = True
        return verdict
    finally:  # a refusal, an error, SIGINT or SIGTERM (the CLI's handler) alike
        if not o.keep or not done:
            shutil.rmtree(folder, ignore_errors=True)  # this run's own folder, made above
            if not done:
                _unmake(made)
        if o.keep and done:
            log.info("scratch kept at %s", dest.url)


def _mkdir_p(folder: Path, made: list[Path]) -> None:
    """`folder` and its missing parents made, as `mkdir -p` would; each appended to `made` as it is
    made, deepest last (so what a failure part-way made is known)."""
    for missing in reversed([p for p in (folder, *folder.parents) if not p.exists()]):
        missing.mkdir()
        made.append(missing)


def _unmake(made: list[Path]) -> None:
    """The folders `_mkdir_p` made, deepest first, each only while empty: a rehearsal that
    did not run leaves nothing it made."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:  # something else was put there meanwhile: not ours to remove
            return


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
    scratch: Scratch, answer: dict, keep: bool, seconds: dict[str, float], facts: Facts | None, dest: Storage
) -> Rehearsal:
    error, compare_error = (SparkError.of(raw.get("condition"), raw.get("message", "")) if raw else None
                            for raw in (answer.get("error"), answer.get("compare_error")))  # fmt: skip
    stores = tuple(StoreComparison(**s) for s in answer.get("stores", []))
    committed = bool(answer.get("committed"))
    gone = [str(p) for p in answer.get("input_gone", [])]
    code = CodeOutcome(**answer["code"]) if answer.get("code") else None
    timed_out = answer.get("timed_out")
    return Rehearsal(
        checkpoint=scratch.source,
        batch=scratch.batch,
        spark_version=str(answer.get("spark_version")),
        outcome=outcome_of(error, committed, stores, bool(gone), compare_error, code, timed_out),
        error=error,
        compare_error=compare_error,
        input_gone=len(gone),
        input_gone_shown=tuple(gone[:3]),
        inputs=len(scratch.inputs),
        stores=stores,
        # No session conf when the query never started (its input gone): nothing to compare.
        pinned=pinned_differences(scratch.pinned, answer["session_conf"]) if "session_conf" in answer else (),
        # What recovery after the batch reads, as the checkpoint's own deployment wrote it: the
        # scratch's would be this session's (its maintenance interval, its snapshot settings,
        # which no offset pins), a chain of 0 where the checkpoint's is 29.
        max_header_fraction=scratch.header_fraction_after if committed else None,
        max_chain_length=scratch.chain_after if committed else None,
        scratch=dest.url,
        kept=keep,
        fork_files=scratch.fork.files + scratch.planned_files,
        fork_bytes=scratch.fork.total_bytes,
        seconds=seconds,
        foreseen=_foreseen(facts, str(answer.get("spark_version"))),
        code=code,
        timed_out=timed_out,
        stopped_queries=tuple(answer.get("stopped_queries", ())),
    )
