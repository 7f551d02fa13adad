"""The defaults every entry point shares: the core, the CLI and Dagster read them from one object,
so a validation finding and the action it triggers (a long chain and its compaction, a lineage
header near the cap and its rescue) can never drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import humanfriendly

from checkpoint import bounds

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Policy:
    # Changelogs replayed from which validation warns (LONG_REPLAY_CHAIN) and compaction acts.
    long_chain: int = 10
    # Fraction of the 65,535-byte lineage header cap from which validation errs
    # (LINEAGE_HEADER_NEAR_CAP) and compaction rescues the store.
    header_cap_ratio: float = 0.8
    # Cleanup deletes only files older than this; below the floor only a test with a clock may go.
    grace_seconds: float = 6 * 3600
    min_grace_seconds: float = 15 * 60
    # A commit or offset newer than this marks a query live. No deployment goes below the floor
    # unless it says it is unsafe (`unsafe_floors`): a running query idle for longer is taken
    # for stopped.
    quiet_seconds: float = 3600
    min_quiet_seconds: float = 15 * 60
    # A checkpoint with no commit and no offset for this long is dormant (DORMANT; STOPPED_MID_BATCH
    # when its newest batch was planned and never committed): its query is stopped or gone.
    dormant_seconds: float = 7 * 86400
    min_dormant_seconds: float = 86400  # a retirement plans no shorter dormancy without an unsafe flag
    # The commit sensor looks at a dormant checkpoint once per this long, not every tick: whether
    # the commit after the newest it saw exists (one stat, one HEAD on S3). Once per
    # `dormant_list_seconds` that look is the listing of `commits/` every other look is.
    dormant_look_seconds: float = 3600
    dormant_list_seconds: float = 86400
    # A retirement plan is applied no sooner than this after it was made (the time for a team to
    # object); below the floor only with `--unsafe-short-grace` (`unsafe_floors` in Dagster).
    retire_grace_seconds: float = 7 * 86400
    min_retire_grace_seconds: float = 86400
    # The expired-state check warns when more than this share of a checkpoint's entries with a TTL
    # has expired: its restart recovers them and spends its first batch deleting them.
    expired_share_warn: float = 0.25
    # How long a maintenance lease outlives a holder that stopped renewing it (killed with -9):
    # until then, every other action on the checkpoint refuses or waits.
    lease_ttl_seconds: float = 600
    # A rebuild's memory, whatever the store's size: RocksDB's memtable (flushed to a new SST when
    # full, so a large chain flushes several times), its block cache for the point reads, and the
    # copies of base files to local disk (chunk size x concurrent copies).
    rebuild_memtable_bytes: int = 32 << 20
    rebuild_block_cache_bytes: int = 32 << 20
    # The chain is read a part of about this many decoded bytes at a time, never a whole changelog:
    # its parsed records are the Python side of a rebuild's memory, whatever the chain's length.
    # Smaller than a changelog of 10^5 records, so that a short chain's parts are already as large
    # as a long one's; with the 32 MiB memtable, which both chains fill, peak RSS hardly follows
    # the chain (bench/README.md, compaction (e): 8 MiB parts and a 64 MiB memtable took 218 MB for
    # 10^6 records and 314 MB for 10^7; these take 197 and 210).
    rebuild_chunk_bytes: int = 2 << 20
    # A migration writes a whole store, which its restarted query then opens: 64 MiB memtables
    # leave 12 level-0 SSTs at 10M keys, under RocksDB's write slowdown (20), where 32 MiB would
    # leave about 24 (docs/migrate.md).
    migrate_memtable_bytes: int = 64 << 20
    # Keys a migration tracks (about 200 bytes each) to count a store without reading it back;
    # past it, the store's keys are counted once written.
    migrate_tracked_keys: int = 250_000
    copy_chunk_bytes: int = 4 << 20
    copy_workers: int = 4
    # Files a fork copies at once: each a round trip on S3 (or a server-side copy), one copy chunk
    # of memory when the bytes pass through.
    fork_workers: int = 16
    # The commit sensor: a checkpoint is validated at most once per period (at once when its new
    # batch shows an error); per tick it requests at most so many runs, and never more than a
    # job's queue has room for; one validation run covers at most so many checkpoints.
    validation_period_seconds: float = 15 * 60
    sensor_interval_seconds: float = 60  # between commit-sensor ticks
    discovery_interval_seconds: float = 300  # between discovery-sensor ticks
    sensor_max_runs_per_tick: int = 10
    # A commit-sensor tick looks at checkpoints for this long at most (in turn, from where the
    # last tick stopped): Dagster kills a tick at 60 s, and deployments often cut it at 15 s.
    sensor_tick_budget_seconds: float = 30
    # A look at one checkpoint (the commit sensor's, the fleet view's, discovery's listing of a
    # folder) that has not answered in this long is abandoned and reported: the others go on.
    look_timeout_seconds: float = 10
    # On an object store a look is many round trips, through one client the looks in flight share:
    # bounded as a hang, not as a pace (8 looks side by side on Azure passed 10 s on a busy host).
    remote_look_timeout_seconds: float = 60
    sensor_max_queued_per_job: int = 8
    validation_run_max_checkpoints: int = 500
    # The schedules' runs name at most so many checkpoints each (maintenance validates, compacts
    # and cleans each in one Spark application), so 10,000 checkpoints are 50 runs a tick.
    maintenance_run_max_checkpoints: int = 200
    # The commit sensor gathers due compactions for up to this long (unless a run's worth is due
    # sooner) and asks for runs of at most so many checkpoints, one Spark application each.
    compaction_gather_seconds: float = 120
    compaction_run_max_checkpoints: int = 10
    # Discovery audits new checkpoints in batched validation runs, at most so many runs a tick;
    # the checkpoints beyond are added by the next ticks.
    discovery_max_runs_per_tick: int = 100
    # Requests in flight at once; each is a round trip on S3, so latency, not CPU, bounds them: one
    # tree listed as several prefixes, stores resolved by a head-first load, checkpoints read by
    # the fleet report and by the commit sensor's tick.
    list_workers: int = 8
    # Files a walk of a whole checkpoint holds at once (`Storage.pages`): S3's page.
    list_page: int = 1000
    # Cleanup planning: partitions decided in this many worker processes (deciding is Python work,
    # and so is what botocore spends on each request: one core bounds each process), from this
    # many partition folders up (fewer do not repay starting the processes). On object stores
    # each process decides several partitions at once, `list_workers` in flight in all.
    plan_processes: int = 4
    plan_processes_from: int = 16
    # Where they would be spawned on a local disk (this process runs other threads), they start
    # only once the partitions left hold this many files, at the mean of those decided so far in
    # this process: a spawned worker imports this package first, about a second of CPU, and one
    # process decides tens of thousands of files a second (a plan of 2,314 files in 16 partitions
    # took 0.04 s in one process and 0.37 s in two spawned workers). Forked ones start at once.
    plan_processes_from_files: int = 50_000
    # What the partitions a plan decides at once in one process may hold of their listings in all
    # (a few hundred bytes a file), and one partition more: a partition starts once the largest
    # listed so far fits beside those in hand (`cleanup.held`).
    plan_files_at_once: int = 50_000
    store_workers: int = 16
    fleet_workers: int = 16
    # On local disks a look at a checkpoint is Python work one core bounds: from this many
    # checkpoints, the fleet view reads them in `plan_processes` worker processes instead.
    fleet_processes_from: int = 400
    fleet_table_rows: int = 100  # the most urgent rows the fleet asset shows; every row is in its file
    sensor_workers: int = 32
    # Keys per delete request: S3's DeleteObjects takes 1000 at most (storage.DELETE_MAX_KEYS).
    delete_batch_size: int = 1000
    # A Dagster step waits this long for a lease held elsewhere, then is retried so many times,
    # this far apart, before it fails naming the holder.
    lease_wait_seconds: float = 120
    lease_retries: int = 3
    lease_retry_delay_seconds: float = 60
    # The fleet report warns from this fraction of the lineage header cap (validation errs from
    # header_cap_ratio).
    fleet_header_warn_ratio: float = 0.6
    # The audit trail keeps each checkpoint's newest plans (with their outcomes) whatever their
    # age, and older ones for this long; the cleanup run removes the rest and records it.
    audit_retention_seconds: float = 30 * 86400
    audit_keep_plans: int = 10
    # Requests botocore sends for one S3 call at most (the first included, adaptive back-off);
    # rounds a DeleteObjects' retryable per-key failures are sent again.
    s3_max_attempts: int = 10
    delete_attempts: int = 6
    # When the read-only audit and the fleet report run, and a root's maintenance pass by default.
    audit_cron: str = "0 */6 * * *"
    maintenance_cron: str = "30 3 * * *"
    # What a checkpoint may declare about itself (`spark.sql.shuffle.partitions`, an operator's
    # `numPartitions` and stores, its schema files, the size of a log or metadata file): past
    # these, the file is refused in one line before anything is built from it, so a forged count
    # costs no memory. Far above any real query (Spark's own default is 200 partitions).
    max_state_partitions: int = 100_000
    max_stores_per_operator: int = 64
    max_state_stores: int = 100_000  # partitions x stores, over a batch's operators
    max_schema_paths: int = 1_000
    max_log_file_bytes: int = 16 << 20
    # The HDFS-backed store's compaction loads the whole map on the driver's heap, which every
    # other store shares: a store whose map would take more than this share of the heap free is
    # refused alone, before it is loaded.
    hdfs_heap_share: float = 0.6
    # A rehearsal's time limit: the query's function, its batch and the comparison of the state.
    rehearsal_timeout_seconds: float = 3600
    # Where rebuild jobs run when nothing else is said (CLI --master, Dagster CKPT_SPARK_MASTER).
    spark_master: str = "local[*]"


POLICY = Policy()


def parse_duration(text: str) -> float:
    """'6h', '15m', '90s', '2d', '1.5 hours' or plain seconds: finite, from 0 to a century."""
    try:
        seconds = humanfriendly.parse_timespan(text.strip())
    except (humanfriendly.InvalidTimespan, ValueError, OverflowError) as exc:
        raise ValueError(f"not a duration: {text!r} (use e.g. 6h, 15m, 90s)") from exc
    try:
        return bounds.seconds(seconds, f"the duration {text.strip()!r}")
    except bounds.OutOfRange as exc:
        raise ValueError(f"{exc} (use e.g. 6h, 15m, 90s)") from exc


def duration_text(seconds: float) -> str:
    """The shortest exact spelling parse_duration reads back: 21600 -> '6h'."""
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"
