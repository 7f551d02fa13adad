"""Migration as the tests drive it: a stopped copy, the migration through the shared session, and
the proof by restart against an untouched copy of its source."""

from __future__ import annotations

from pathlib import Path

from tests.support.copies import stopped_copy

V2_SESSION = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}


def restarted_differently(spark, name: str, scenario_dir: Path, migrated: Path, control: Path, extra: Path):
    """The real query restarted on a migrated checkpoint and on an untouched copy of its source with
    the same new input: where what they emit and the state they end with (each read by Spark in a
    session of its format) differ; nothing when they are the same."""
    from jobs.spark_session import scoped_confs
    from testbed.restart import differences, restart, state_rows, untouched
    from tests.support.defaults import V1_SESSION

    def restarted(path: Path, confs: dict[str, str]) -> dict:
        run = restart(spark, name, scenario_dir, path, extra, read_state=False)
        with scoped_confs(spark, confs):
            return {**run, "state": state_rows(spark, path, name)}

    untouched_run = untouched(spark, "emitted, state read as V1", name, scenario_dir, control, {},
                              lambda: restarted(control, V1_SESSION))  # fmt: skip
    return differences(restarted(migrated, V2_SESSION), untouched_run)


def migrate(spark, src: Path, dest: Path, audit: Path):
    """`src` migrated to `dest` under the shared session, its records in `audit`."""
    from checkpoint.migrate import MigrationOptions, migrate_checkpoint
    from checkpoint.safety import AuditTrail, TwoSided, taken_at_once
    from checkpoint.storage import Storage
    from jobs.migrate import spark_ports

    request = TwoSided(Storage(str(src)), Storage(str(dest)), taken_at_once("tests"), AuditTrail(str(audit)))
    return migrate_checkpoint(request, MigrationOptions(spark_ports(lambda: spark)))


def stopped(checkpoints: dict[str, Path], name: str, where: Path) -> Path:
    """A copy of `checkpoints[name]` at `where`, stopped for longer than the quiet period."""
    return stopped_copy(checkpoints[name], where, 2 * 3600)
