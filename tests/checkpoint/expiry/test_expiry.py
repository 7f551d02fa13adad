"""Expired transformWithState state: reported (`ckpt lineage --expired`, `ckpt purge-expired
--report`) as Spark's state reader shows it, and purged offline (`ckpt purge-expired`) from a real
query whose TTLs expired (the operator corpus's `expiring`: value, list and map state, with entries
expired and not, lists holding both), then restarted beside an untouched copy."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from checkpoint.crash import CRASH_ENV
from testbed.copying import copy_checkpoint
from testbed.operators import ensure_operator_corpus
from tests.support.cli import ckpt
from tests.support.copies import stopped_copy
from tests.support.files import files_of
from tests.support.leases import lapse_leases

NAME = "expiring"
# Where Spark's state reader shows each variable's expiry.
EXPIRY_OF = {"count": "value", "items": "list_element", "last": "user_map_value"}


@pytest.fixture(scope="module")
def corpus() -> Path:
    return ensure_operator_corpus()


def stopped_query(corpus: Path, dest: Path, name: str = NAME) -> Path:
    """A copy of the operator corpus' query `name` whose last commit is two hours old: a query
    stopped past the quiet period (an hour)."""
    return stopped_copy(corpus / name / "checkpoint", dest, 2 * 3600)


def run(*args: str, env: dict[str, str] | None = None) -> dict:
    out = ckpt(*args, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def purged_here(ports, path: Path, as_of: str) -> dict:
    """`ckpt purge-expired PATH --as-of AS_OF --json`'s document, the purge run in this session's
    Spark (a second JVM proves nothing more: the command's own path is run by the kills, the
    report's test and the cluster's)."""
    from checkpoint.expiry import PurgeOptions, purge_expired
    from checkpoint.safety import AuditTrail, InPlace, taken_at_once
    from checkpoint.storage import Storage

    storage = Storage(str(path))
    options = PurgeOptions(float(as_of), now=time.time(), run=ports.purge)
    request = InPlace(storage, taken_at_once("tests"), AuditTrail(AuditTrail.default_for(storage.url)))
    return purge_expired(request, options).as_dict()


def by_variable(report: dict) -> dict[str, tuple[int, int]]:
    """(entries, expired) of each state variable, over every store of the report."""
    totals: dict[str, tuple[int, int]] = {}
    for store in report["stores"]:
        for v in store["variables"]:
            entries, expired = totals.get(v["name"], (0, 0))
            totals[v["name"]] = (entries + v["entries"], expired + v["expired"])
    return totals


def spark_sees(ports, path: Path, as_of_ms: int, name: str) -> dict[str, tuple[int, int]]:
    """(rows, rows expired at `as_of_ms`) of each state variable, as Spark's state reader reads it
    (in a session of the checkpoint's format)."""
    from testbed.operators import scenario_named
    from testbed.restart import latest_batch

    seen = {}
    with ports.confs(scenario_named(name).confs):
        for var, column in EXPIRY_OF.items():
            reader = ports.spark.read.format("statestore").option("batchId", latest_batch(path))
            rows = reader.option("stateVarName", var).load(str(path)).collect()
            seen[var] = (len(rows), sum(r[column].ttlExpirationMs <= as_of_ms for r in rows))
    return seen


@pytest.mark.parametrize("name", [NAME, "expiring_v1"])
def test_the_report_is_what_spark_reads_and_the_purged_query_restarts_like_an_untouched_copy(
    ports, spark, corpus, tmp_path, name
) -> None:
    from testbed.restart import differences, restart

    purged = stopped_query(corpus, tmp_path / "purged", name)
    control = stopped_query(corpus, tmp_path / "control", name)
    as_of, untouched = time.time(), files_of(purged)
    assert run("lineage", str(purged), "--expired")["expired"]["as_of_ms"] >= as_of * 1000  # now, by default
    report = run("purge-expired", str(purged), "--report", "--as-of", str(as_of))
    before = by_variable(report)
    assert before == spark_sees(ports, control, report["as_of_ms"], name)
    # Every kind expired, and not all of any: a list keeps some elements and loses others.
    assert all(0 < expired for _, expired in before.values())
    assert before["items"][1] < before["items"][0] and before["last"][1] < before["last"][0]
    assert files_of(purged) == untouched  # a report writes nothing
    (row,) = run("fleet", str(tmp_path), "--expired", "--no-cleanup-plan")["checkpoints"][:1]
    assert [row[k] for k in ("expired", "expired_share", "expired_bytes")] == [
        report[k] for k in ("expired", "expired_share", "expired_bytes")
    ]

    done = run("purge-expired", str(purged), "--as-of", str(as_of))
    assert [s["outcome"] for s in done["stores"]] == ["purged"] * len(report["stores"])
    assert by_variable(done) == before and done["expired"] == report["expired"] > 0
    after = run("purge-expired", str(purged), "--report", "--as-of", str(as_of))
    assert after["expired"] == 0 and after["entries"] == report["entries"] - report["expired"]
    left = {var: (entries - expired, 0) for var, (entries, expired) in before.items()}
    assert spark_sees(ports, purged, report["as_of_ms"], name) == left
    again = purged_here(ports, purged, str(as_of))  # nothing left: nothing written
    assert {s["outcome"] for s in again["stores"]} == {"nothing expired"}
    audit = sorted((tmp_path / "_ckpt_audit").glob("*/purges/*.json"))
    assert len(audit) == 2 and json.loads(audit[0].read_text())["expired"] == report["expired"]

    extra = tmp_path / "extra"
    runs = [restart(spark, name, corpus / name, path, extra) for path in (purged, control)]
    assert differences(*runs) == []


def test_what_a_purge_refuses_it_refuses_before_writing(corpus, tmp_path) -> None:
    live = tmp_path / "live"
    copy_checkpoint(corpus / NAME / "checkpoint", live)
    for log in (live / "commits").iterdir():  # a commit just written, however old the cache
        os.utime(log)
    before = files_of(live)
    out = ckpt("purge-expired", str(live))
    assert out.returncode == 2 and "looks alive" in out.stderr

    stopped = stopped_query(corpus, tmp_path / "stopped")
    untouched = files_of(stopped)
    # The review: a trail inside the checkpoint was accepted (its record then a folder the metadata
    # does not name, which every later action refused); a trail that is a file failed after every
    # store was purged; a master that is none printed the JVM's stack. Each is refused first.
    out = ckpt("purge-expired", str(stopped), "--audit", str(stopped / "state" / "0" / "0"))
    assert out.returncode == 2 and "the audit trail and the source overlap" in out.stderr, out.stderr
    (tmp_path / "a-file").write_text("not a folder")
    out = ckpt("purge-expired", str(stopped), "--audit", str(tmp_path / "a-file"))
    assert out.returncode == 2 and "the audit trail cannot be written" in out.stderr, out.stderr
    out = ckpt("purge-expired", str(stopped), "--master", "foo")
    assert out.returncode == 2 and "'foo' is not a Spark master" in out.stderr, out.stderr
    assert files_of(stopped) == untouched
    out = ckpt("purge-expired", str(stopped), "--as-of", str(time.time() + 3600))
    assert out.returncode == 2 and "later than now" in out.stderr
    out = ckpt("purge-expired", str(stopped), "--report", "--as-of", str(time.time() + 3600))
    assert out.returncode == 2 and "later than now" in out.stderr  # as --help says: never later
    (stopped / "commits" / "5").unlink()  # batch 5 planned, never committed, its offset just written
    os.utime(stopped / "offsets" / "5")
    out = ckpt("purge-expired", str(stopped))
    assert (
        out.returncode == 2 and "batch 5 is planned and not committed, and a commit or offset" in out.stderr
    )
    out = ckpt("purge-expired", str(stopped), "--as-of", "yesterday")
    assert out.returncode == 2 and "neither ISO 8601" in out.stderr
    out = ckpt("purge-expired", str(stopped), "--as-of", "nan")
    assert out.returncode == 2 and "is not a time" in out.stderr
    assert files_of(live) == before and not list((tmp_path / "_ckpt_audit").glob("*/purges"))


def test_a_damaged_file_stops_the_purge_without_advice_to_run_it_again(corpus, tmp_path) -> None:
    """The review: a changelog cut short made the purge say "run the same purge again to finish
    it", which stops on the same file. It now names the damage and what a rerun needs first."""
    damaged = stopped_query(corpus, tmp_path / "damaged")
    folder = damaged / "state" / "0" / "1"
    newest = max(folder.glob("*.changelog"), key=lambda p: int(p.name.split("_")[0].split(".")[0]))
    newest.write_bytes(newest.read_bytes()[:-7])
    out = ckpt("purge-expired", str(damaged))
    assert out.returncode == 1 and "a file it reads is damaged" in out.stderr, out.stderr
    assert "once that file is restored" in out.stderr and "run the same purge again" not in out.stderr
    (record,) = (tmp_path / "_ckpt_audit").glob("*/purges/*.json")  # written as begun, then ended
    ended = json.loads(record.read_text())
    assert ended["outcome"] == "stopped" and "damaged" in ended["why"] and len(ended["stores"]) == 4


def test_absurd_times_and_a_quiet_period_under_its_floor_are_refused_before_anything(
    corpus, tmp_path
) -> None:
    """`--as-of 1e18` was a 20-line traceback; `--as-of -1e18` purged, wrote its record, then raised;
    `--quiet-period 0s` purged a query committed a minute before (the 15-minute floor was Dagster's
    alone). Each is refused in words, nothing written; a live query's refusal names the way out."""
    stopped = stopped_query(corpus, tmp_path / "stopped")
    before = files_of(stopped)
    for as_of in ("1e18", "-1e18", "1e308", "99999999999", "-1"):
        out = ckpt("purge-expired", str(stopped), f"--as-of={as_of}")
        assert out.returncode == 2 and "not a time" in out.stderr and "Traceback" not in out.stderr, (
            out.stderr
        )
    out = ckpt("purge-expired", str(stopped), "--report", "--as-of", str(time.time() + 3600))
    assert out.returncode == 2 and "later than now" in out.stderr, out.stderr
    recent = tmp_path / "recent"
    copy_checkpoint(corpus / NAME / "checkpoint", recent)
    for log in (recent / "commits").iterdir():  # committed a minute ago, however old the cache
        os.utime(log, (time.time() - 60, time.time() - 60))
    out = ckpt("purge-expired", str(recent), "--quiet-period", "0s")
    assert out.returncode == 2 and "below the floor of 15m" in out.stderr, out.stderr
    assert "--unsafe-short-quiet-period" in out.stderr
    out = ckpt("purge-expired", str(recent))
    assert out.returncode == 2 and "looks alive" in out.stderr and "--quiet-period" in out.stderr
    assert files_of(stopped) == before and not list(tmp_path.glob("_ckpt_audit/*/purges"))


@pytest.fixture(scope="module")
def cleanly_purged(ports, spark, corpus, tmp_path_factory) -> tuple[str, object]:
    """(the purge time, the state rows) of a copy purged in one run, never killed: what every
    killed and rerun purge of the same copy must end as, purged as of the same time."""
    from testbed.restart import state_rows

    clean = stopped_query(corpus, tmp_path_factory.mktemp("clean") / "clean")
    as_of = str(time.time())
    purged_here(ports, clean, as_of)
    return as_of, state_rows(spark, clean, NAME)


@pytest.mark.parametrize("point", ["compaction.before_sidecar", "purge.after_store:1", "purge.after_store:4"])
def test_killed_at_each_step_the_same_purge_finishes_it(
    ports, spark, corpus, cleanly_purged, tmp_path, point
):
    """Killed in a store's Spark task after its zip and before its sidecar, and the driver killed
    after the first and after the last store: the same purge run again (in this session's Spark)
    ends as a clean one."""
    from testbed.restart import state_rows

    as_of, clean_rows = cleanly_purged
    killed = stopped_query(corpus, tmp_path / "killed")
    args = ("purge-expired", str(killed), "--as-of", as_of, "--lease-ttl", "10m")
    died = ckpt(*args, env={CRASH_ENV: point})
    if point.startswith("compaction."):  # in a store's Spark task, which dies: the purge stops
        assert died.returncode == 1 and "purge incomplete" in died.stderr, died.stderr
        assert "run the same purge again" in died.stderr
    else:  # the driver killed: its lease is held until it expires
        assert died.returncode == -signal.SIGKILL
        refused = ckpt(*args)
        assert refused.returncode == 2 and "lease" in refused.stderr
        lapse_leases(killed)
    done = purged_here(ports, killed, as_of)
    # A zip without its sidecar is the store's own snapshot to the rerun: Spark 4.3 reads it so. The
    # stores run two at a time (local[2]) in Spark's JVM, which finishes the stores in flight, and
    # may start the next, before it sees its driver gone (seen: three published after the first).
    published = {"compaction.before_sidecar": 1, "purge.after_store:1": 1, "purge.after_store:4": 4}[point]
    outcomes = [s["outcome"] for s in done["stores"]]
    assert published <= outcomes.count("nothing expired") <= len(outcomes) == 4, outcomes
    assert run("purge-expired", str(killed), "--report", "--as-of", as_of)["expired"] == 0
    assert state_rows(spark, killed, NAME) == clean_rows


def test_the_purge_runs_unchanged_on_a_standalone_cluster(ports, spark, corpus, tmp_path) -> None:
    """A task a store on a standalone master and worker, as on `local[2]`: the same state after."""
    from testbed.restart import state_rows
    from tests.support.cluster import standalone_cluster

    on_cluster, here = stopped_query(corpus, tmp_path / "cluster"), stopped_query(corpus, tmp_path / "here")
    as_of = str(time.time())
    with standalone_cluster(tmp_path / "cluster-logs") as master:
        out = ckpt("purge-expired", str(on_cluster), "--as-of", as_of, "--master", master, "--json",
                   timeout=600, env={"SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    done = json.loads(out.stdout)
    assert {s["outcome"] for s in done["stores"]} == {"purged"} and done["expired"] > 0
    assert purged_here(ports, here, as_of)["expired"] == done["expired"]
    assert state_rows(spark, on_cluster, NAME) == state_rows(spark, here, NAME)


@pytest.fixture(scope="module")
def one_store(corpus) -> tuple[list[tuple[bytes, bytes]], list, str]:
    """Every entry of partition 0 of the expiring query at its latest version (rebuilt as a purge
    rebuilds it), its variables with a TTL, and the path it came from."""
    from checkpoint.compaction import rewrite_store
    from checkpoint.expiry.ttl import ttl_variables
    from checkpoint.model import checkpoint_lineage, load_head
    from checkpoint.policy import POLICY
    from checkpoint.rocksdb import open_db

    ckpt = load_head(str(corpus / NAME / "checkpoint"))
    entry = next(e for e in checkpoint_lineage(ckpt) if e.store.partition == 0)
    props = ckpt.operators[0].metadata.properties
    found: dict = {}

    def read(folder, meta, tmp):
        db = open_db(folder, POLICY, read_only=True)
        try:
            found["entries"], found["variables"] = list(db.items()), ttl_variables(props, meta, "p0")
        finally:
            db.close()

    rewrite_store(ckpt.for_store(entry.store), entry, read)
    return found["entries"], found["variables"], str(entry.store)


def test_the_ttl_reader_given_damaged_entries_refuses_or_evicts_only_its_families(
    one_store, tmp_path
) -> None:
    """A real store with one key or value damaged as the fuzzer damages files: the reader raises
    CorruptFileError or returns an eviction that touches only the families of the variables it
    evicts from. Any other exception is a crash."""
    import rocksdict
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from checkpoint.errors import CorruptFileError
    from checkpoint.expiry.ttl import expired_in
    from testbed.mutation import EXAMPLES, mutate, mutations

    entries, variables, where = one_store
    owned = {f for v in variables for f in (v.values, v.index, v.least, v.count) if f is not None}
    as_of = int(time.time() * 1000)
    made = iter(range(1 << 30))

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
    @given(st.integers(0, len(entries) - 1), st.booleans(), mutations())
    def fuzz(at: int, in_key: bool, changes) -> None:
        damaged = list(entries)
        key, value = damaged[at]
        damaged[at] = (mutate(key, changes), value) if in_key else (key, mutate(value, changes))
        db = rocksdict.Rdict(str(tmp_path / f"db-{next(made)}"), options=rocksdict.Options(raw_mode=True))
        try:
            for k, v in damaged:
                db[k] = v
            try:
                _, eviction = expired_in(db, variables, as_of, where)
            except CorruptFileError:
                return
            assert {k[:2] for k in [*eviction.deletes, *eviction.puts]} <= owned
        finally:
            db.close()

    fuzz()
