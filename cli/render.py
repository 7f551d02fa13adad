"""The text form of each command's `--json` document: what a person reads on a terminal."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import humanfriendly
from tabulate import tabulate

from checkpoint.analysis import human_bytes

Doc = dict[str, Any]


def _table(rows: list[tuple], header: tuple[str, ...]) -> str:
    return tabulate(rows, headers=header, tablefmt="plain", disable_numparse=True)


def _batch(n: int | None) -> str:
    return "none" if n is None else str(n)


def inspect_text(doc: Doc) -> str:
    lines = [
        f"checkpoint   {doc['path']}",
        f"format       V{doc['format_version']}, {doc['provider']} state store   "
        f"query id {doc['query_id'] or 'unknown'}",
        f"batches      latest planned {_batch(doc['latest_planned_batch'])}, "
        f"latest committed {_batch(doc['latest_committed_batch'])}",
        f"size         {human_bytes(doc['bytes'])} in {sum(doc['files'].values())} files",
        "operators",
    ]
    if not doc["operators"]:
        lines.append("  (stateless query)")
    for op in doc["operators"]:
        stores = ", ".join(op["stores"])
        lines.append(f"  {op['id']}  {op['name'] or '?'}  partitions {op['partitions']}  stores {stores}")
    lines.append("files")
    lines.append(_table(list(doc["files"].items()), ("kind", "count")))
    return "\n".join(lines)


def lineage_text(doc: Doc) -> str:
    # A store recovery could not load has no chain to speak of: "?" there, and why, below the table.
    rows = [
        (s["operator"], s["partition"], s["store"], s["version"],
         "-" if s["snapshot_version"] is None else s["snapshot_version"],
         "?" if s["problem"] else s["chain_length"], human_bytes(s["replay_bytes"]),
         f"{s['lineage_header_bytes']} B")
        for s in doc["stores"]
    ]  # fmt: skip
    text = _table(rows, ("op", "part", "store", "version", "snapshot", "chain", "replay", "header"))
    broken = [s for s in doc["stores"] if s["problem"]]
    if broken:
        lines = [f"{len(broken)} of {len(doc['stores'])} store(s) cannot be loaded at this batch:"]
        lines += [f"  op {s['operator']} part {s['partition']} {s['store']}: {s['problem']}" for s in broken]
        text += "\n" + "\n".join(lines)
    return text


def validation_text(doc: Doc) -> str:
    if not doc["findings"]:
        return "ok: no findings"
    lines = [
        f"{f['severity'].upper():7}  {f['code']}  {f['path']}\n         {f['message']}"
        for f in doc["findings"]
    ]
    counts = Counter(f["severity"] for f in doc["findings"])
    verdict = "ok" if doc["ok"] else "NOT OK"
    lines.append(f"{verdict}: " + ", ".join(f"{n} {sev}" for sev, n in sorted(counts.items())))
    return "\n".join(lines)


def scan_text(doc: Doc) -> str:
    if not doc["checkpoints"]:
        return f"no checkpoints under {doc['root']}"
    rows = [
        (c["path"], c["state_format"] or "-",
         "-" if c["latest_committed_batch"] is None else c["latest_committed_batch"], c["health"],
         c["errors"], c["warnings"], c["max_chain_length"] or 0)
        for c in doc["checkpoints"]
    ]  # fmt: skip
    return _table(rows, ("checkpoint", "format", "committed", "health", "errors", "warnings", "max chain"))


def _reclaimable(size: int | None, planned_at: float | None) -> str:
    if size is None:
        return "-"
    if planned_at is None:
        return human_bytes(size)
    return f"{human_bytes(size)} ({humanfriendly.format_timespan(time.time() - planned_at, max_units=1)} ago)"


def fleet_text(doc: Doc, attention: list[tuple[str, str, str]]) -> str:
    """`attention`: (url, reason, action) of the checkpoints that need it, most urgent first."""
    rows = doc["checkpoints"]
    if not rows:
        return "no checkpoints found"
    counts = doc.get("readiness")
    looked = any(r["expired"] is not None for r in rows)  # `--expired`: a column of what expired
    # With a target Spark, a last column: whether it restarts each (`Readiness.label`).
    last = [(*((_expired(r),) if looked else ()),
                 *(((r["readiness"] or {}).get("label") or "unknown: unreadable",) if counts else ()))
                for r in rows]  # fmt: skip
    table: list[tuple] = [
        (r["url"], r["state_format"] or "-", r["latest_committed_batch"], _activity(r),
         ",".join(r["errors"]) or "-", ",".join(r["warnings"]) or "-", r["max_chain_length"],
         f"{r['max_lineage_header_fraction']:.0%}",
         _reclaimable(r["reclaimable_bytes"], r["reclaimable_planned_at"]), *on)
        for r, on in zip(rows, last, strict=True)
    ]  # fmt: skip
    header: tuple[str, ...] = (
        "checkpoint", "state", "batch", "activity", "errors", "warnings", "chain", "header", "reclaimable"
    )  # fmt: skip
    if looked:
        header += ("expired",)
    if counts:
        header += (f"on {counts['target']}",)
    items = [f"{i}. {url}: {reason}; {action}" for i, (url, reason, action) in enumerate(attention, 1)]
    lines = [_table(table, header), ""]
    idle = [r for r in rows if r["dormant_since"] is not None or r["stopped_mid_batch_since"] is not None]
    if idle:
        dormant = sum(r["dormant_since"] is not None for r in idle)
        unknown = sum(r["bytes_held"] is None for r in idle)
        known = human_bytes(sum(r["bytes_held"] or 0 for r in idle))
        held = f"holding {known}" if unknown < len(idle) else ""
        if unknown:  # the default view lists no checkpoint: what a trail does not know yet is not shown
            held += f"{', and ' if held else ''}{unknown} holding what is not known yet (--held lists them)"
        lines += [f"{dormant} dormant, {len(idle) - dormant} stopped mid-batch (no commit and no offset for "
                  f"the dormancy period), {held}", ""]  # fmt: skip
    if counts:
        lines += [f"Spark {counts['target']} restarts {counts['yes']} of {len(rows)} checkpoints; "
                  f"{counts['no']} not, {counts['unknown']} cannot be told (docs/format.md, upgrade "
                  "readiness)"]  # fmt: skip
        if refused := counts["actions_refused"]:
            lines.append(
                f"Under Spark {counts['target']} this project would refuse: "
                + ", ".join(f"{action} ({n} checkpoints)" for action, n in refused.items())
            )
        lines.append("")
    return "\n".join(lines + ["Needs attention, most urgent first:"]
                     + (items or ["nothing: every checkpoint is healthy"]))  # fmt: skip


def _activity(row: dict) -> str:
    """A fleet row's activity: live, stopped, or since when it is dormant or stopped mid-batch."""
    for key, what in (("dormant_since", "dormant"), ("stopped_mid_batch_since", "stopped mid-batch")):
        if row[key] is not None:
            held = "" if row["bytes_held"] is None else f", {human_bytes(row['bytes_held'])} held"
            return f"{what} since {datetime.fromtimestamp(row[key], tz=timezone.utc):%Y-%m-%d}{held}"
    return "live" if row["live"] else "stopped"


def gc_text(doc: Doc) -> str:
    plan = doc["plan"]
    live = ", live query" if plan["live"] else ""
    lines = [
        f"plan: {plan['files']} files, {human_bytes(plan['bytes'])} to delete "
        f"(against batch {plan['against_batch']}{live}); {plan['retained_files']} files retained",
    ]
    if plan["by_reason"]:
        rows = [(f"  {r}", v["files"], human_bytes(v["bytes"])) for r, v in plan["by_reason"].items()]
        lines.append(tabulate(rows, tablefmt="plain", disable_numparse=True))
    if plan["kept"]:
        lines.append("  not yet: " + ", ".join(f"{n} {why}" for why, n in plan["kept"].items()))
    lines.append(f"manifest: {doc['plan_file']}")
    if not doc["applied"]:
        lines.append("dry run: nothing deleted (add --apply to delete)")
        return "\n".join(lines)
    counts = f"{doc['skipped']} skipped, {doc['failed']} failed"
    lines.append(f"applied: {doc['deleted']} deleted ({human_bytes(doc['deleted_bytes'])}), {counts}")
    lines.append(f"check: {doc['check']}")
    if not doc["plan"]["files"]:
        lines.append("nothing to delete")
    elif not doc["deleted"] and not doc["failed"]:
        lines.append("nothing deleted: every candidate was already gone or changed")
    lines += [f"  FAILED {o['path']}: {o['why']}" for o in doc["failures"]]
    if doc["failed"] > len(doc["failures"]):
        lines.append(f"  ... {doc['failed'] - len(doc['failures'])} more failures in the outcomes file")
    lines.append(f"outcomes: {doc['outcomes_file']}")
    return "\n".join(lines)


def _records(records: int | None) -> str:
    # None: Spark's own provider replayed the chain (the HDFS-backed store), and counts nothing
    return "" if records is None else f", {records:,} records"


def compact_text(doc: Doc) -> str:
    lines = [
        f"materialized {len(doc['materialized'])}, skipped {len(doc['skipped'])}, failed {len(doc['failed'])}"
    ]
    lines += [f"  op {m['operator']} part {m['partition']} {m['store']}: version {m['version']} "
              f"(chain of {m['chain_before']}{_records(m['records'])}) in {m['seconds']} s, {m['keys']:,} "
              f"keys, read {human_bytes(m['bytes_read'])}, wrote {human_bytes(m['bytes_written'])}, "
              f"peak RSS {human_bytes(m['peak_rss_bytes'])} -> {m['path']}"
              for m in doc["materialized"]]  # fmt: skip
    lines += [
        f"  FAILED op {f['operator']} part {f['partition']} {f['store']}: {f['error']}" for f in doc["failed"]
    ]
    return "\n".join(lines)


def migrate_text(doc: Doc) -> str:
    stores = doc["stores"]
    lines = [
        f"migrated {doc['source']} ({doc['source_state']}) at batch {doc['batch']} -> {doc['dest']} "
        f"(rocksdb V2): {len(stores)} stores, {doc['keys']:,} keys, {doc['log_files']} log files, "
        f"in {doc['seconds']} s (the state {doc['state_seconds']} s, its proof {doc['proof_seconds']} s)"
    ]
    lines += [f"  proven by Spark's reader: operator {p['operator']} store {p['store']}: {p['rows']:,} rows"
              for p in doc["proven"]]  # fmt: skip
    lines.append("restart the query on the destination with the same code; the source is unchanged "
                 "(point the query back at it to roll back)")  # fmt: skip
    return "\n".join(lines)


def fork_text(doc: Doc) -> str:
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


def profile_text(doc: Doc) -> str:
    lines = [f"{doc['checkpoint']}: batch {doc['batch']}, {doc['partitions']} state partitions"]
    for op in doc["operators"]:
        spread = op["skew"]
        lines.append(f"operator {op['operator']} ({op['name']}): skew (max/mean) bytes {spread['bytes']}, "
                     f"keys {spread['keys']}; largest partitions {op['largest']}")  # fmt: skip
        rows = [
            (p["partition"], human_bytes(p["bytes"]), p["keys"], _batch(p["keys_as_of"]))
            for p in op["partitions"]
        ]
        lines.append(_table(rows, ("partition", "bytes", "keys", "keys as of version")))
    for pred in doc.get("predicted", []):
        ok = pred["self_check"]["ok"]
        check = (
            "ok" if ok else f"FAILED on partitions {pred['self_check']['partitions_off']}: do not repartition"
        )
        lines.append(
            f"operator {pred['operator']} store {pred['store']}: {pred['rows']} rows; self-check {check}"
        )
        counts: list[tuple] = [("now", "", " ".join(map(str, pred["now"])))]
        counts += [(n, c["skew"], " ".join(map(str, c["rows"]))) for n, c in pred["candidates"].items()]
        lines.append(_table(counts, ("partitions", "skew", "rows per partition")))
    return "\n".join(lines)


def repartition_text(doc: Doc) -> str:
    where = doc["checkpoint"]
    if doc["outcome"] == "undone":
        return f"{where}: repartition {doc['repartition_id']} undone ({doc['deleted']} files deleted)"
    lines = [
        f"{where}: {doc['from_partitions']} -> {doc['to_partitions']} state partitions, batch {doc['batch']} "
        f"(repartition {doc['repartition_id']})",
        f"backup fork: {doc['backup']}",
    ]
    rows = [
        (
            s["operator"],
            s["store"],
            s["rows"],
            "same" if s["digest_before"] == s["digest_after"] else "differ",
            "-" if s["misplaced"] is None else s["misplaced"],
        )
        for s in doc["stores"]
    ]
    lines.append(_table(rows, ("operator", "store", "rows", "digest", "misplaced")))
    lines.append("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in doc["seconds"].items()))
    return "\n".join(lines)


def rehearse_text(doc: Doc) -> str:
    lines = [
        f"{doc['checkpoint']}: batch {doc['batch']} under Spark {doc['spark_version']}: {doc['outcome']}"
    ]
    if doc["input_gone"]:
        lines[0] += (f": {doc['input_gone']} of the {doc['inputs']} files batch {doc['batch']} read are gone "
                     f"(first: {doc['input_gone_shown'][0]})")  # fmt: skip
    if code := doc["code"]:
        raised = f"{code['type']}: " if code["type"] and code["type"] != "SystemExit" else ""
        lines.append(f"the query's function: {raised}{code['message']}")
    if doc["timed_out"]:
        lines.append(f"the time limit passed while {doc['timed_out']} ran: stopped, nothing compared "
                     "(--timeout)")  # fmt: skip
    for q in doc["stopped_queries"]:
        lines.append(f"a query it left running was stopped: {q}")
    if error := doc["error"]:
        lines += [f"Spark: {error['condition'] or 'no error condition'}: {error['message']}",
                  f"cause: {error['cause']}", f"remedy: {error['remedy']}"]  # fmt: skip
    if error := doc["compare_error"]:
        lines.append(f"the state at batch {doc['batch']} could not be read: {error['message']}")
    differing = [s for s in doc["stores"] if s["only_original"] or s["only_rehearsal"]]
    if doc["stores"]:
        rows = [(f"{s['operator']}/{s['store']}", s["original_rows"], s["rehearsal_rows"], s["only_original"],
                 s["only_rehearsal"]) for s in doc["stores"]]  # fmt: skip
        lines.append(_table(rows, ("store", "rows (original)", "rows (rehearsal)", "only original",
                                   "only rehearsal")))  # fmt: skip
    for s in differing:
        lines.append(f"store {s['operator']}/{s['store']}: keys whose rows differ: {', '.join(s['keys'])}")
    for c in doc["pinned"]:
        lines.append(f"pinned conf {c['key']} = {c['pinned']} (the session has {c['session']}): Spark uses "
                     f"{c['pinned']}")  # fmt: skip
    if foreseen := doc["foreseen"]:
        lines.append(f"the upgrade readiness table (docs/format.md) for Spark {foreseen['target']}: "
                     f"{foreseen['label']}")  # fmt: skip
    if doc["max_header_fraction"] is not None:
        lines.append(f"after the batch, in the checkpoint: {doc['max_header_fraction']:.0%} of the lineage "
                     f"header cap, longest chain {doc['max_chain_length']}")  # fmt: skip
    where = f"kept at {doc['scratch']}" if doc["kept"] else "removed"
    lines.append(f"scratch fork: {doc['fork_files']} files, {human_bytes(doc['fork_bytes'])}, {where}")
    return "\n".join(lines)


def _expired(row: Doc) -> str:
    if row["expired"] is None:
        return "-"
    return f"{row['expired']:,} ({row['expired_share']:.0%}, {human_bytes(row['expired_bytes'] or 0)})"


def expired_text(doc: Doc) -> str:
    # To the millisecond, as the purge acts: a time rounded to the second would be one it did not use.
    at = datetime.fromtimestamp(doc["as_of_ms"] / 1000, timezone.utc).isoformat(timespec="milliseconds")
    at = at.replace("+00:00", " UTC")
    if not doc["stores"]:
        return f"no transformWithState store with a TTL at batch {_batch(doc['batch'])}: nothing expires"
    lines = [f"{doc['expired']:,} of {doc['entries']:,} entries ({doc['expired_share']:.1%}, "
             f"{human_bytes(doc['expired_bytes'])}) expired at {at}, batch {doc['batch']}"]  # fmt: skip
    if doc.get("replays") is not None:
        lines.append(f"batch {doc['replays']} is planned and not committed (stopped mid-batch, or running): "
                     "its replay evicts as of its own time, and this is no later: nothing it reads "
                     "is taken")  # fmt: skip
    rows = [(s["operator"], s["partition"], s["store"], s["version"], s["entries"], s["expired"],
             human_bytes(s["expired_bytes"]), s["outcome"]) for s in doc["stores"]]  # fmt: skip
    lines.append(_table(rows, ("op", "part", "store", "version", "entries", "expired", "bytes", "outcome")))
    variables: dict[str, list[int]] = {}
    for s in doc["stores"]:
        for v in s["variables"]:
            sums = variables.setdefault(v["name"], [0, 0, 0])
            for i, k in enumerate(("entries", "expired", "expired_bytes")):
                sums[i] += v[k]
    totals = [(name, e, x, human_bytes(b)) for name, (e, x, b) in sorted(variables.items())]
    lines.append(_table(totals, ("state variable", "entries", "expired", "bytes")))
    if any(s["outcome"] == "its own snapshot" for s in doc["stores"]):
        lines.append("a store whose version is its own snapshot keeps its expired entries: its name is "
                     "taken, and Spark evicts them in the query's next batch")  # fmt: skip
    return "\n".join(lines)
