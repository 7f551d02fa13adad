"""A processing-time TTL query as users run it (no-data batches on) asks for a batch at every
trigger, so a stop usually finds it mid-batch: offset N written, commit N not. The operator
corpus's `stopped_midbatch` is such a query (value, list and map state with TTLs, and
processing-time timers), its driver killed in a no-data batch. Its purge is as of batch N's own
time, which the replay of N reuses: the purged copy and an untouched one restart alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.checkpoint.expiry.test_expiry import by_variable, run, spark_sees, stopped_query
from tests.support.cli import ckpt
from tests.support.files import files_of

MIDBATCH = ["stopped_midbatch", "stopped_midbatch_v1"]
TIMERS = "{'readRegisteredTimers': 'true'}:"


def planned(path: Path) -> tuple[int, int]:
    """The batch planned and not committed, and its own time (the offset log's batchTimestampMs)."""
    batch = max(int(p.name) for p in (path / "offsets").iterdir() if p.name.isdigit())
    assert not (path / "commits" / str(batch)).exists()
    return batch, json.loads((path / "offsets" / str(batch)).read_text().splitlines()[1])["batchTimestampMs"]


@pytest.mark.parametrize("name", MIDBATCH)
def test_a_query_stopped_mid_batch_is_purged_as_its_replay_sees_it_and_restarts_like_its_control(
    ports, spark, operators, tmp_path, name
) -> None:
    from testbed.restart import differences, restart, state_rows

    purged = stopped_query(operators, tmp_path / "purged", name)
    control = stopped_query(operators, tmp_path / "control", name)
    batch, own = planned(purged)
    report = run("purge-expired", str(purged), "--report")  # by default as of the replay's time too
    assert (report["replays"], report["as_of_ms"], report["batch"]) == (batch, own, batch - 1)
    expected = spark_sees(ports, control, own, name)
    assert by_variable(report) == expected
    # Every kind expired by the replay's time, and not all of the lists and maps.
    assert all(expired > 0 for _, expired in expected.values())
    assert all(expected[v][1] < expected[v][0] for v in ("items", "last"))
    text = ckpt("purge-expired", str(purged), "--report").stdout
    assert f"batch {batch} is planned and not committed" in text and "state variable" in text

    done = run("purge-expired", str(purged))
    assert (done["replays"], done["as_of_ms"]) == (batch, own)
    assert {s["outcome"] for s in done["stores"]} == {"purged"} and by_variable(done) == expected
    (record,) = (tmp_path / "_ckpt_audit").glob("*/purges/*.json")
    assert {k: json.loads(record.read_text())[k] for k in ("replays", "as_of_ms")} == {
        "replays": batch,
        "as_of_ms": own,
    }
    left = {var: (entries - expired, 0) for var, (entries, expired) in expected.items()}
    assert spark_sees(ports, purged, own, name) == left
    # The timers are not TTL state: every registered one is kept (those in 2100 are never due).
    timers = [r for r in state_rows(spark, purged, name) if r.startswith(TIMERS)]
    assert timers and timers == [r for r in state_rows(spark, control, name) if r.startswith(TIMERS)]

    extra = tmp_path / "extra"
    runs = [restart(spark, name, operators / name, path, extra) for path in (purged, control)]
    assert differences(*runs) == []
    assert (purged / "commits" / str(batch)).exists()  # the restart replayed the planned batch


def test_a_purge_time_later_than_the_replayed_batch_is_refused_in_one_line(operators, tmp_path) -> None:
    stopped = stopped_query(operators, tmp_path / "stopped", MIDBATCH[0])
    batch, own = planned(stopped)
    before = files_of(stopped)
    out = ckpt("purge-expired", str(stopped), "--as-of", str(own / 1000 + 1))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"later than batch {batch}'s own time" in out.stderr and "nothing was written" in out.stderr
    # An earlier time takes less than the replay will: allowed, and reported as asked.
    earlier = run("purge-expired", str(stopped), "--report", "--as-of", str(own / 1000 - 3600))
    assert earlier["as_of_ms"] == own - 3_600_000 and earlier["replays"] == batch
    assert files_of(stopped) == before and not list(tmp_path.glob("_ckpt_audit/*/purges"))
