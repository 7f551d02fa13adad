"""`ckpt`: the maintenance operations for people outside Dagster.

Exit codes: 0 success; 1 `validate`/`scan` found error findings, `gc --apply`/`compact` failed on
some file or store, or a fork stopped part-way (run it again to finish); 2 the checkpoint cannot be
read, the cleanup, compaction or fork was refused, or another action holds the checkpoint's
maintenance lease (a one-line error on stderr naming it, no traceback).

"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from contextlib import nullcontext

from checkpoint.audit import AuditTrail
from checkpoint.discovery import scan
from checkpoint.errors import CheckpointError
from checkpoint.gc_apply import apply_plan
from checkpoint.gc_plan import GcError, plan_gc
from checkpoint.head import load_head
from checkpoint.lease import lease_for
from checkpoint.lineage import checkpoint_lineage
from checkpoint.model import load_checkpoint
from checkpoint.policy import POLICY, duration_text, parse_duration
from checkpoint.report import (
    format_inspect,
    format_lineage,
    format_scan,
    format_validation,
    human_bytes,
    inspect_summary,
    lineage_document,
    scan_entry,
    validation_document,
)
from checkpoint.storage import Storage
from checkpoint.validate import ValidationOptions, validate

EXIT_FINDINGS = 1
EXIT_UNREADABLE = 2


def _emit(args: argparse.Namespace, doc: dict, human) -> None:
    for handler in logging.getLogger("checkpoint").handlers:
        if isinstance(handler, _StatusLine):
            handler.clear()
    print(json.dumps(doc, indent=2) if args.json else human(doc))


def _inspect(args: argparse.Namespace) -> int:
    _emit(args, inspect_summary(load_checkpoint(args.path)), format_inspect)
    return 0


def _lineage(args: argparse.Namespace) -> int:
    ckpt = load_head(args.path, batches=None if args.batch is None else [args.batch])
    _emit(args, lineage_document(checkpoint_lineage(ckpt, args.batch)), format_lineage)
    return 0


def _options(args: argparse.Namespace) -> ValidationOptions:
    return ValidationOptions(deep=getattr(args, "deep", False), long_chain_threshold=args.long_chain)


def _validate(args: argparse.Namespace) -> int:
    validation = validate(load_head(args.path, strict=False, sidecars=args.deep), _options(args))
    _emit(args, validation_document(validation), format_validation)
    return 0 if validation.ok else EXIT_FINDINGS


def _scan(args: argparse.Namespace) -> int:
    storage, found = scan(args.root)
    entries = []
    for f in found:
        ckpt = validation = error = None
        try:
            ckpt = f.load(storage, strict=False)  # head-first: what recovery reads, no state listing
            validation = validate(ckpt, _options(args))
        except CheckpointError as exc:  # one unreadable checkpoint does not hide the others
            error = str(exc)
        entries.append(scan_entry(f.url, ckpt, validation, error))
    _emit(args, {"root": storage.url, "checkpoints": entries}, format_scan)
    return 0 if all(e["health"] == "ok" for e in entries) else EXIT_FINDINGS


def _fleet(args: argparse.Namespace) -> int:
    from checkpoint.fleet import fleet_row, ranked, unreadable_row

    rows = []
    for root in args.roots:
        storage, found = scan(root)
        for f in found:
            known = {}
            try:
                if not args.no_cleanup_plan:  # what a dry-run cleanup with the default grace finds
                    known["reclaimable_bytes"] = _reclaimable(f.url)
                rows.append(fleet_row(f.url, f.load(storage, strict=False), **known))
            except CheckpointError as exc:  # one unreadable checkpoint is a row, never the end
                rows.append(unreadable_row(f.url, f.url, str(exc), **known))
    rows = ranked(rows)
    _emit(args, {"checkpoints": [r.as_dict() for r in rows]}, lambda _: _format_fleet(rows))
    return EXIT_FINDINGS if any(r.errors for r in rows) else 0


def _reclaimable(url: str) -> int | None:
    """The bytes a dry-run cleanup plan with the default grace would delete: it lists every file,
    which only cleanup planning needs; None when cleanup refuses to plan this checkpoint."""
    try:
        return plan_gc(load_checkpoint(url, listing="auto")).bytes
    except GcError:
        return None


def _format_fleet(rows) -> str:
    import pandas as pd

    from checkpoint.fleet import needs_attention

    if not rows:
        return "no checkpoints found"
    table = pd.DataFrame([{
        "checkpoint": r.url, "batch": r.latest_committed_batch, "live": r.live,
        "errors": ",".join(r.errors) or "-", "warnings": ",".join(r.warnings) or "-",
        "chain": r.max_chain_length, "header": f"{r.max_lineage_header_fraction:.0%}",
        "reclaimable": "-" if r.reclaimable_bytes is None else human_bytes(r.reclaimable_bytes),
    } for r in rows])  # fmt: skip
    attention = [f"{i}. {a.row.url}: {a.reason}; {a.action}" for i, a in enumerate(needs_attention(rows), 1)]
    return "\n".join([table.to_string(index=False), "", "Needs attention, most urgent first:"]
                     + (attention or ["nothing: every checkpoint is healthy"]))  # fmt: skip


def _leased(args: argparse.Namespace, storage: Storage, what: str):
    """The checkpoint's maintenance lease for a command that changes it, taken before it plans."""
    return lease_for(storage, owner=f"ckpt {what}", ttl=args.lease_ttl).acquire(wait=args.wait)


def _gc(args: argparse.Namespace) -> int:
    storage = Storage(args.path)
    audit = AuditTrail(args.audit or AuditTrail.default_for(storage.url))
    with _leased(args, storage, "gc --apply") if args.apply else nullcontext() as lease:
        # strict: a plan is built only from a completely read checkpoint
        ckpt = load_checkpoint(storage, listing="auto")
        plan = plan_gc(
            ckpt,
            grace_seconds=args.grace,
            retain_batches=args.retain_batches,
            quiet_seconds=args.quiet_period,
            allow_short_grace=args.unsafe_short_grace,
        )
        doc = {"plan": plan.summary(), "plan_file": audit.write_plan(plan), "applied": False,
               "deleted": [], "failed": [], "skipped": []}  # fmt: skip
        if args.apply:
            result = apply_plan(plan, ckpt.storage, audit, batch_size=args.batch_size, lease=lease)
            doc.update(
                applied=True,
                check=result.check.message,
                outcomes_file=audit.outcomes_url(plan),
                **result.summary(),
            )
    _emit(args, doc, _format_gc)
    return EXIT_FINDINGS if doc["failed"] else 0


def _format_gc(doc: dict) -> str:
    plan = doc["plan"]
    live = ", live query" if plan["live"] else ""
    lines = [
        f"plan: {plan['files']} files, {human_bytes(plan['bytes'])} to delete "
        f"(against batch {plan['against_batch']}{live}); {plan['retained_files']} files retained",
    ]
    lines += [
        f"  {r:24} {v['files']:6} files  {human_bytes(v['bytes'])}" for r, v in plan["by_reason"].items()
    ]
    if plan["kept"]:
        lines.append("  not yet: " + ", ".join(f"{n} {why}" for why, n in plan["kept"].items()))
    lines.append(f"manifest: {doc['plan_file']}")
    if not doc["applied"]:
        lines.append("dry run: nothing deleted (add --apply to delete)")
    else:
        counts = f"{len(doc['skipped'])} skipped, {len(doc['failed'])} failed"
        lines.append(
            f"applied: {len(doc['deleted'])} deleted ({human_bytes(doc['deleted_bytes'])}), {counts}"
        )
        lines.append(f"check: {doc['check']}")
        if not doc["plan"]["files"]:
            lines.append("nothing to delete")
        elif not doc["deleted"] and not doc["failed"]:
            lines.append("nothing deleted: every candidate was already gone or changed")
        lines += [f"  FAILED {o['path']}: {o['why']}" for o in doc["failed"]]
        lines.append(f"outcomes: {doc['outcomes_file']}")
    return "\n".join(lines)


def _compact(args: argparse.Namespace) -> int:
    from checkpoint.compaction import plan_compaction
    from jobs.compact import run_compaction
    from jobs.spark_session import session_for

    storage = Storage(args.path)
    with _leased(args, storage, "compact") as lease:
        ckpt = load_head(storage, recent=2)  # a live query is compacted at the batch below the newest
        targets, skips = plan_compaction(ckpt, min_chain=args.min_chain)
        results = []
        if targets:
            results = run_compaction(session_for(args.master), ckpt, targets, lambda _: lease.check())
    # The figures of each rebuild: what it read and wrote, and the memory it took (issue: per store).
    keep = ("operator", "partition", "store", "version", "unique_id", "path", "seconds", "keys",
            "chain_before", "records", "touched_keys", "bytes_read", "bytes_written", "peak_rss_bytes",
            "memtable_bytes", "block_cache_bytes")  # fmt: skip
    doc = {
        "materialized": [{k: r.as_dict()[k] for k in keep} for r in results if r.ok],
        "failed": [r.as_dict() for r in results if not r.ok],
        "skipped": [s.as_dict() for s in skips],
    }
    _emit(args, doc, _format_compact)
    return EXIT_FINDINGS if doc["failed"] else 0


def _format_compact(doc: dict) -> str:
    lines = [
        f"materialized {len(doc['materialized'])}, skipped {len(doc['skipped'])}, failed {len(doc['failed'])}"
    ]
    lines += [f"  op {m['operator']} part {m['partition']} {m['store']}: version {m['version']} "
              f"(chain of {m['chain_before']}, {m['records']:,} records) in {m['seconds']} s, {m['keys']:,} "
              f"keys, read {human_bytes(m['bytes_read'])}, wrote {human_bytes(m['bytes_written'])}, "
              f"peak RSS {human_bytes(m['peak_rss_bytes'])} -> {m['path']}"
              for m in doc["materialized"]]  # fmt: skip
    lines += [
        f"  FAILED op {f['operator']} part {f['partition']} {f['store']}: {f['error']}" for f in doc["failed"]
    ]
    return "\n".join(lines)


def _fork(args: argparse.Namespace) -> int:
    from checkpoint.fork import ForkIncomplete, fork, refuse_overlap

    src, dest = Storage(args.source), Storage(args.dest)
    refuse_overlap(src, dest)
    # SRC's lease keeps a cleanup from deleting what is being copied; DEST's keeps two forks apart.
    with _leased(args, src, "fork (source)") as held, _leased(args, dest, "fork") as lease:

        def check() -> None:
            held.check()
            lease.check()

        try:
            result = fork(src, dest, args.batch, args.new_query_id, args.workers, check)
        except ForkIncomplete as exc:
            print(f"ckpt: fork incomplete: {exc}", file=sys.stderr)
            return EXIT_FINDINGS
    _emit(args, result.as_dict(), _format_fork)
    return 0


def _format_fork(doc: dict) -> str:
    if doc["already_complete"]:
        return (
            f"{doc['dest']}: already a complete fork of {doc['source']} at batch {doc['batch']}; nothing done"
        )
    done = (f"forked {doc['source']} at batch {doc['batch']} -> {doc['dest']}: {doc['files']} files, "
            f"{human_bytes(doc['bytes'])} (what recovery at batch {doc['batch']} reads)")  # fmt: skip
    how = (f"this run wrote {doc['copied_files']} files ({human_bytes(doc['copied_bytes'])}), "
           f"{doc['server_side_files']} copied server-side, {doc['resumed_files']} kept from an interrupted "
           f"run, in {doc['seconds']} s and {doc['requests']} requests")  # fmt: skip
    return "\n".join([done, how, f"query id: {doc['query_id']}"])


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckpt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    where = "checkpoint folder: a path or any fsspec URL (file://, s3://, ...)"

    p = sub.add_parser("inspect", help="what a checkpoint holds: format, batches, operators, files")
    p.add_argument("path", help=where)
    p.set_defaults(run=_inspect)

    p = sub.add_parser("lineage", help="per store: the replay chain Spark would load, its length and bytes")
    p.add_argument("path", help=where)
    p.add_argument(
        "--batch", type=int, help="a batch still in the commit log (default: the latest committed)"
    )
    p.set_defaults(run=_lineage)

    p = sub.add_parser("validate", help="commit log, offset log and state files checked against each other")
    p.add_argument("path", help=where)
    p.add_argument("--deep", action="store_true", help="also decompress every chain file and check its .crc")
    p.set_defaults(run=_validate)

    p = sub.add_parser("scan", help="every checkpoint under a root, at any depth, with its health")
    p.add_argument("root", help="a folder or any fsspec URL")
    p.set_defaults(run=_scan)

    p = sub.add_parser("fleet", help="one row per checkpoint under the roots, most urgent first")
    p.add_argument("roots", nargs="+", help="folders or fsspec URLs holding checkpoints at any depth")
    p.add_argument("--no-cleanup-plan", action="store_true",
                   help="skip the dry-run cleanup plans (each lists all of its checkpoint)")  # fmt: skip
    p.set_defaults(run=_fleet)

    p = sub.add_parser("gc", help="plan (and with --apply, delete) files no batch will ever read again")
    p.add_argument("path", help=where)
    p.add_argument(
        "--apply", action="store_true", help="delete; without it, a dry run that writes the plan only"
    )
    p.add_argument("--grace", type=_duration, default=POLICY.grace_seconds, metavar="DURATION",
                   help=f"only files older than this (default {duration_text(POLICY.grace_seconds)}; "
                   f"below {duration_text(POLICY.min_grace_seconds)} is refused)")  # fmt: skip
    p.add_argument("--retain-batches", type=int, metavar="N",
                   help="keep the last N committed batches (default: all in the commit log)")  # fmt: skip
    p.add_argument("--quiet-period", type=_duration, default=POLICY.quiet_seconds, metavar="DURATION",
                   help="a commit or offset newer than this marks the query live "
                   f"(default {duration_text(POLICY.quiet_seconds)})")  # fmt: skip
    p.add_argument("--audit", metavar="URL", help="where plans and outcomes are kept (default: "
                   "_ckpt_audit beside the checkpoint)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=1000, metavar="N",
                   help="keys per delete request (1-1000, default 1000)")  # fmt: skip
    p.add_argument("--unsafe-short-grace", action="store_true",
                   help="allow a grace period under 15 minutes: files of a batch being written could be "
                   "deleted; only for checkpoints nothing writes to")  # fmt: skip
    p.set_defaults(run=_gc)

    p = sub.add_parser("compact", help="materialise snapshots for stores with long changelog chains")
    p.add_argument("path", help=where)
    p.add_argument(
        "--min-chain",
        type=int,
        default=POLICY.long_chain,
        metavar="N",
        help=f"compact from this chain length ({POLICY.long_chain})",
    )
    p.add_argument("--master", default="local[*]", help="Spark master for the rebuild job (local[*])")
    p.set_defaults(run=_compact)

    p = sub.add_parser("fork", help="a new checkpoint holding exactly what recovery at a committed batch "
                       "reads: relocate, roll back, or audit a copy")  # fmt: skip
    p.add_argument("source", help=where)
    p.add_argument("dest", help="an empty folder or URL (any fsspec URL; S3 to S3 copies server-side)")
    p.add_argument("--batch", type=int, help="a committed batch (default: the latest committed)")
    p.add_argument(
        "--new-query-id",
        action="store_true",
        help="give the fork a query id of its own (sinks that remember batches: README)",
    )
    p.add_argument("--workers", type=int, default=POLICY.fork_workers, metavar="N",
                   help=f"files copied at once (default {POLICY.fork_workers})")  # fmt: skip
    p.set_defaults(run=_fork)

    for name in ("compact", "fork"):
        # Leases live beside each checkpoint whatever the audit trail, so every deployment meets there:
        # these commands write no plan, and the flag stays only so that old scripts still parse.
        sub.choices[name].add_argument("--audit", metavar="URL", help=argparse.SUPPRESS)
    for name in ("gc", "compact", "fork"):
        sub.choices[name].add_argument(
            "--wait", type=_duration, default=0, metavar="DURATION",
            help="when another action holds the checkpoint's maintenance lease, wait this long for it "
            "(default: refuse at once, exit 2)",
        )  # fmt: skip
        sub.choices[name].add_argument(
            "--lease-ttl", type=_duration, default=POLICY.lease_ttl_seconds, metavar="DURATION",
            help="how long this command's lease outlives it if it is killed without giving it back "
            f"(default {duration_text(POLICY.lease_ttl_seconds)}; renewed every third of it while it runs)",
        )  # fmt: skip
    for name in ("validate", "scan"):
        sub.choices[name].add_argument(
            "--long-chain",
            type=int,
            default=POLICY.long_chain,
            metavar="N",
            help=f"warn from this replay-chain length ({POLICY.long_chain})",
        )
    for command in sub.choices.values():
        command.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


class _StatusLine(logging.Handler):
    """The core's progress lines (files listed, stores read, requests sent) as one status line that
    rewrites itself on a terminal; it is cleared before the command prints its result."""

    def __init__(self, stream) -> None:
        super().__init__(logging.INFO)
        self.stream, self.shown = stream, False

    def emit(self, record: logging.LogRecord) -> None:
        self.stream.write("\r\x1b[K" + record.getMessage()[:200])
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    core = logging.getLogger("checkpoint")
    status = _StatusLine(sys.stderr) if sys.stderr.isatty() and not args.json else None
    if status is not None:
        core.addHandler(status)
        core.setLevel(logging.INFO)
    try:
        return args.run(args)
    except CheckpointError as exc:
        if status is not None:
            status.clear()
        print(f"ckpt: error: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except KeyboardInterrupt:
        return 130
    finally:
        if status is not None:
            status.clear()
            core.removeHandler(status)


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
