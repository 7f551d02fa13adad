"""What every command family shares: the result a command returns, exit codes, argument types."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from checkpoint import bounds
from checkpoint.errors import Refused
from checkpoint.policy import POLICY, duration_text, parse_duration
from checkpoint.safety import AuditTrail, InPlace, Lease, TwoSided, lease_for
from checkpoint.storage import Storage

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_UNREADABLE = 2

WHERE = "checkpoint folder: a path or a URL (file://, s3://, az://, gs://)"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is (`terminated`, the handler a command installs), so that
    what it made is removed by its `finally` as for SIGINT; the CLI exits 143."""


def terminated(signum: int, frame: object) -> None:
    raise Terminated()


@dataclass(frozen=True)
class Result:
    """What a command did: `doc` is its `--json` document, `text` renders the same document for a
    person, `exit_code` is what the process exits with."""

    doc: dict[str, Any]
    text: Callable[[dict[str, Any]], str]
    exit_code: int = EXIT_OK


def whole(low: int, high: int = bounds.MAX_COUNT) -> Callable[[str], int]:
    """An argument type: a whole number from `low` to `high`, else argparse's own refusal."""

    def parse(text: str) -> int:
        try:
            return bounds.count(int(text.strip()), "it", low=low, high=high)
        except (ValueError, bounds.OutOfRange) as exc:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number from {low} to {high:,}"
            ) from exc

    return parse


BATCH_ID = whole(0)  # a batch id: Spark's long
DELETE_BATCH = whole(1, POLICY.delete_batch_size)  # keys in one delete request


# The masters Spark's submit takes: a typo is refused here in one line, not by the JVM's stack trace.
_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+, *\d+, *\d+\]|(spark|k8s)://\S+|yarn")


def spark_master(text: str) -> str:
    if not _MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Spark master (local, local[N], local[*], "
                                         "spark://HOST:PORT, k8s://URL or yarn)")  # fmt: skip
    return text


def master_option(p: argparse.ArgumentParser, what: str = "") -> None:
    """`--master`: the Spark master an action runs its tasks on, one name and one check everywhere."""
    p.add_argument("--master", type=spark_master, default=POLICY.spark_master,
                   help=f"Spark master{what} ({POLICY.spark_master})")  # fmt: skip


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_dormant_after(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dormant-after", type=duration, default=POLICY.dormant_seconds, metavar="DURATION",
                   help="a checkpoint with no commit and no offset for this long is dormant (default "
                   f"{duration_text(POLICY.dormant_seconds)})")  # fmt: skip


def leased(args: argparse.Namespace, storage: Storage, what: str) -> Lease:
    """The checkpoint's maintenance lease for a command that changes it, taken before it plans."""
    return lease_for(storage, owner=f"ckpt {what}", ttl=args.lease_ttl).acquire(wait=args.wait)


def trail_of(args: argparse.Namespace, storage: Storage) -> AuditTrail:
    """Where a command's plans and records go: `--audit`, or beside the checkpoint at `storage`."""
    return AuditTrail(args.audit or AuditTrail.default_for(storage.url))


def in_place(args: argparse.Namespace, storage: Storage, trail: AuditTrail | None = None) -> InPlace:
    """The request of a command that changes the checkpoint at `storage`, its lease taken as `leased`
    takes it; `trail`, a command's that keeps records (`trail_of`)."""
    return InPlace(storage, lambda storage, what: leased(args, storage, what), trail)


def two_sided(
    args: argparse.Namespace, src: Storage, dest: Storage, trail: AuditTrail | None = None
) -> TwoSided:
    """The request of a command that writes DEST from SRC, its leases taken as `leased` takes one;
    `trail`, a command's that keeps records (`trail_of`)."""
    return TwoSided(src, dest, lambda storage, what: leased(args, storage, what), trail)


def quiet_period_option(p: argparse.ArgumentParser) -> None:
    """`--quiet-period`: one name and one meaning for every command that refuses a live query, and
    the floor Dagster keeps (`unsafe_floors`), which only `--unsafe-short-quiet-period` lowers."""
    floor = duration_text(POLICY.min_quiet_seconds)
    p.add_argument("--quiet-period", type=duration, default=POLICY.quiet_seconds, metavar="DURATION",
                   help="a commit or offset newer than this marks the query live, and the command refuses it "
                   f"(default {duration_text(POLICY.quiet_seconds)}; under {floor} only with "
                   "--unsafe-short-quiet-period)")  # fmt: skip
    p.add_argument("--unsafe-short-quiet-period", action="store_true",
                   help=f"accept a quiet period under the floor of {floor}: a running query idle for that "
                   "long would be taken for stopped (for a query known to be stopped)")  # fmt: skip


def quiet_seconds(args: argparse.Namespace) -> float:
    """`--quiet-period`, refused under the floor unless `--unsafe-short-quiet-period` says so."""
    floor = POLICY.min_quiet_seconds
    if args.quiet_period < floor and not args.unsafe_short_quiet_period:
        raise Refused(f"a quiet period of {duration_text(args.quiet_period)} is below the floor of "
                      f"{duration_text(floor)}: a running query idle for that long would be taken for "
                      "stopped (--unsafe-short-quiet-period, for a query known to be stopped); nothing "
                      "was done")  # fmt: skip
    return args.quiet_period


def takes_the_lease(p: argparse.ArgumentParser, *, writes_no_plan: bool = False) -> None:
    """The options of a command that changes a checkpoint under its maintenance lease."""
    if writes_no_plan:
        # Leases live beside each checkpoint whatever the audit trail, so every deployment meets
        # there: such a command writes no plan, and the flag stays only so that old scripts parse.
        p.add_argument("--audit", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--wait", type=duration, default=0, metavar="DURATION",
                   help="when another action holds the checkpoint's maintenance lease, wait this long for "
                   "it (default: refuse at once, exit 2)")  # fmt: skip
    p.add_argument("--lease-ttl", type=duration, default=POLICY.lease_ttl_seconds, metavar="DURATION",
                   help="how long this command's lease outlives it if it is killed without giving it back "
                   f"(default {duration_text(POLICY.lease_ttl_seconds)}; renewed every third of it while it "
                   "runs)")  # fmt: skip
