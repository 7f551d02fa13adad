"""A corpus scenario: a query over deterministic inputs run with its confs, and the one whose
driver is killed mid-batch and restarted."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from jobs.spark_session import scoped_confs
from testbed.queries import (
    _keyed_rows,
    _run,
    write_inputs,
)
from testbed.sinks import (
    KILLED_AT_BATCH,
    _killing_sink,
)


@dataclass(frozen=True)
class Scenario:
    """A query over deterministic inputs (one file per batch), run with its confs.

    `inputs` maps a subfolder of `input/` ("" for `input/` itself) to the rows of each file.
    """

    name: str
    description: str
    query: Callable  # (spark, input folder, max files per trigger) -> streaming DataFrame
    batches: int
    confs: dict[str, str]
    inputs: dict[str, Callable[[int], list[dict]]] = field(default_factory=lambda: {"": _keyed_rows})
    output_mode: str = "update"
    sink: Callable | None = None  # a foreachBatch function; None: the noop sink

    def write_inputs(self, out: Path, batches: int, start: int = 0, folder: str = "input") -> None:
        for sub, rows_for in self.inputs.items():
            write_inputs(out / folder / sub if sub else out / folder, batches, rows_for, start)

    def paths(self, out: Path, extra: Path | None = None) -> dict[str, str]:
        """The source path of each input; with `extra`, a glob over the original folder and `extra`.

        A glob keeps Spark from pinning the source's base path, which a checkpoint copied elsewhere
        (its source log names the original files) would otherwise fail on.
        """
        paths = {}
        for sub in self.inputs:
            original = out / "input" / sub if sub else out / "input"
            if extra is None:
                paths[sub] = str(original)
            else:
                added = extra / sub if sub else extra
                paths[sub] = "/{" + str(original).lstrip("/") + "," + str(added).lstrip("/") + "}"
        return paths

    def run(self, spark, out: Path, checkpoint: Path, max_files: int = 1, sink=None, extra=None) -> None:
        with scoped_confs(spark, self.confs):
            query = self.query(spark, self.paths(out, extra), max_files)
            _run(query, checkpoint, self.output_mode, sink or self.sink)

    def build(self, spark, out: Path) -> dict:
        self.write_inputs(out, self.batches)
        self.run(spark, out, out / "checkpoint")
        return {"batches": self.batches}

    def restart(self, spark, out: Path, checkpoint: Path, extra: Path, max_files: int = 100_000) -> None:
        """Runs the query again from `checkpoint` (a copy of one of `out`'s) with one more input file.

        The original inputs stay untouched; the new file goes to `extra`. All new input is read in
        one batch, or `max_files` per batch: 1 replays the original batches that a checkpoint rolled
        back to an earlier batch has not seen, one by one as they first ran. Two copies restarted
        with the same `extra` process the same input.
        """
        for sub, rows_for in self.inputs.items():
            write_inputs(extra / sub if sub else extra, 1, rows_for, start=self.batches)
        self.run(spark, out, checkpoint, max_files=max_files, extra=extra)


class KilledScenario(Scenario):
    """SIGKILL a driver mid-batch, keep a copy, then restart the query and let it finish."""

    child_module = "testbed.corpus"  # whose `--killed-child` runs the driver that is killed

    def build(self, spark, out: Path) -> dict:
        # Nothing is moved afterwards: offset and source logs record absolute input paths.
        self.write_inputs(out, self.batches)
        live = out / "checkpoint_after_restart"
        run_until_killed(out, self.child_module)
        shutil.copytree(live, out / "checkpoint_before_restart")
        self.run(spark, out, live)
        return {"batches": self.batches, "killed_at_batch": KILLED_AT_BATCH}

    def killed_run(self, spark, out: Path, marker: Path) -> None:
        """What the child runs until its sink writes `marker` and it is killed."""
        self.run(spark, out, out / "checkpoint_after_restart", sink=_killing_sink(marker))


def run_until_killed(out: Path, child_module: str) -> None:
    """Runs `python -m child_module --killed-child out` and SIGKILLs it, its JVM with it, once its
    sink wrote `out/batch-running.marker`: a driver gone mid-batch, offset N written, commit N not."""
    marker = out / "batch-running.marker"
    child = subprocess.Popen(
        [sys.executable, "-m", child_module, "--killed-child", str(out)],
        start_new_session=True,  # the driver's JVM is in this group: kill both at once
        stdout=subprocess.DEVNULL,
        stderr=open(out / "child.log", "w"),
    )
    deadline = time.monotonic() + 600
    while not marker.exists():
        if child.poll() is not None:
            raise RuntimeError(f"killed-scenario child exited with {child.returncode}: {out / 'child.log'}")
        if time.monotonic() > deadline:
            os.killpg(child.pid, signal.SIGKILL)
            raise RuntimeError("killed-scenario child never reached the batch to kill")
        time.sleep(0.2)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def run_killed_child(folder: Path, scenario: KilledScenario) -> None:
    """The driver a KilledScenario kills: runs `scenario` until its sink reaches the batch to kill."""
    from jobs.spark_session import local_session

    spark = local_session(master="local[2]", app_name="corpus-killed-child")
    scenario.killed_run(spark, folder, folder / "batch-running.marker")
    raise SystemExit("the killed-scenario child was not killed")
