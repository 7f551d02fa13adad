"""A retirement plan's record: what the plan was, kept beside the checkpoint (`safety.own_place`,
where its lease lives), apart from the manifest. The manifest lies in an audit trail a run may name
anywhere and a person reads, and may edit; the record lies where only those who may change the
checkpoint itself write. The apply trusts the manifest only as far as it matches the record
(its sha256, its header's fields), counts the grace from the record's time, and knows that its
deletion began from the record's marker, not from a line in the trail.

Both are written with write-if-absent: a plan's record, once there, is never replaced."""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import asdict, dataclass

from checkpoint import bounds
from checkpoint.errors import MALFORMED, RetirementRefused
from checkpoint.format import MAINT_TEMP_PREFIX
from checkpoint.retire.manifest import RetirementPlan
from checkpoint.safety import Place, own_place
from checkpoint.storage import Storage

RECORD_FORMAT = 1
_RECORD_LIMIT = 16 << 10  # a record is a few hundred bytes
# A plan id spells its time to the millisecond; the record's time may differ from it by rounding.
_ID_SLACK_SECONDS = 0.002
# Clocks of the host that planned and the host that applies may disagree this much; a plan from
# further in the future than that was not made by this tool.
CLOCK_SKEW_SECONDS = 300.0


@dataclass(frozen=True)
class PlanRecord:
    plan_id: str
    checkpoint: str
    planned_at: float
    manifest_sha256: str
    files: int
    total_bytes: int
    archive: str | None
    dormant_seconds: float
    last_commit: int | None
    manifest_bytes: int  # the manifest's size: a larger one is not copied to be refused
    place: str  # where the checkpoint was, resolved (`safety.Place`): a link repointed since refuses
    folder: tuple[int, ...] | None  # its folder's device and inode, where folders have them

    @staticmethod
    def of(plan: RetirementPlan, manifest_sha256: str, manifest_bytes: int, place: str,
           folder: tuple[int, ...] | None) -> PlanRecord:  # fmt: skip
        return PlanRecord(plan.plan_id, plan.checkpoint, plan.planned_at, manifest_sha256, plan.files,
                          plan.total_bytes, plan.archive, plan.evidence.dormant_seconds,
                          plan.evidence.last_commit, manifest_bytes, place, folder)  # fmt: skip

    def matches(self, plan: RetirementPlan) -> list[str]:
        """The fields of the manifest's header that differ from this record's."""
        mine = asdict(self)
        theirs = asdict(
            PlanRecord.of(plan, self.manifest_sha256, self.manifest_bytes, self.place, self.folder)
        )
        return [k for k, v in mine.items() if theirs[k] != v]

    def dump(self) -> bytes:
        return json.dumps({**asdict(self), "type": "retirement-record", "format": RECORD_FORMAT},
                          sort_keys=True).encode()  # fmt: skip

    @staticmethod
    def parse(data: bytes, where: str) -> PlanRecord:
        try:
            raw = json.loads(data)
            if raw.get("type") != "retirement-record" or raw.get("format") != RECORD_FORMAT:
                raise RetirementRefused(f"not a retirement record of format {RECORD_FORMAT}", where)
            last, folder = raw["last_commit"], raw["folder"]
            record = PlanRecord(
                plan_id=str(raw["plan_id"]), checkpoint=str(raw["checkpoint"]),
                planned_at=bounds.instant(raw["planned_at"], "planned_at"),
                manifest_sha256=str(raw["manifest_sha256"]),
                files=bounds.count(raw["files"], "files"),
                total_bytes=bounds.count(raw["total_bytes"], "total_bytes"),
                archive=None if raw["archive"] is None else str(raw["archive"]),
                dormant_seconds=bounds.seconds(raw["dormant_seconds"], "dormant_seconds", low=1.0),
                last_commit=None if last is None else bounds.count(last, "last_commit"),
                manifest_bytes=bounds.count(raw["manifest_bytes"], "manifest_bytes"),
                place=str(raw["place"]),
                folder=None if folder is None else tuple(bounds.count(n, "folder") for n in folder),
            )  # fmt: skip
        except RetirementRefused:
            raise
        except (json.JSONDecodeError, *MALFORMED) as exc:
            raise RetirementRefused(f"unreadable retirement record: {exc}", where) from exc
        return record


def _place(checkpoint: Storage) -> tuple[Storage, str]:
    storage, folder = own_place(checkpoint)
    return storage, f"{folder}/retirements"


def write_record(
    checkpoint: Storage, plan: RetirementPlan, manifest_sha256: str, manifest_bytes: int
) -> None:
    storage, folder = _place(checkpoint)
    record = PlanRecord.of(
        plan, manifest_sha256, manifest_bytes, str(Place.of(checkpoint)), folder_of(checkpoint)
    )
    storage.write_if_absent(f"{folder}/{plan.plan_id}.json", record.dump(), MAINT_TEMP_PREFIX)


def folder_of(checkpoint: Storage) -> tuple[int, ...] | None:
    """The checkpoint folder's device and inode (of the folder its path resolves to), where the
    storage has folders."""
    found = checkpoint.resolved().folder_ids([""]).get("")
    return None if found is None else tuple(found)


def read_record(checkpoint: Storage, plan: RetirementPlan, now: float) -> PlanRecord:
    """The plan's record beside the checkpoint, checked against the manifest's header; raises
    RetirementRefused (nothing written) when there is none, or it disagrees, or its time is not
    the plan id's or lies ahead of `now`."""
    storage, folder = _place(checkpoint)
    rel = f"{folder}/{plan.plan_id}.json"
    data = storage.read_if_exists(rel, limit=_RECORD_LIMIT)
    if data is None:
        raise RetirementRefused(
            f"no record of plan {plan.plan_id} beside the checkpoint ({storage.full(rel)}): the manifest "
            "was not made by `ckpt retire` for this checkpoint, or its record was removed; plan again",
            plan.manifest,
        )
    record = PlanRecord.parse(data, storage.full(rel))
    if differ := record.matches(plan):
        raise RetirementRefused(f"the manifest's header disagrees with its plan's record "
                                f"({', '.join(differ)}): edited; nothing deleted, plan again",
                                plan.manifest)  # fmt: skip
    if (now_at := str(Place.of(checkpoint))) != record.place:
        raise RetirementRefused(f"the checkpoint is not where it was planned ({record.place}): its path "
                                f"leads to {now_at} now; nothing deleted, plan again",
                                checkpoint.url)  # fmt: skip
    if abs(record.planned_at - plan_id_time(plan.plan_id)) > _ID_SLACK_SECONDS:
        raise RetirementRefused("the plan's record gives another time than its plan id: edited; plan again",
                                storage.full(rel))  # fmt: skip
    if record.planned_at > now + CLOCK_SKEW_SECONDS:
        raise RetirementRefused("the plan's record is dated in the future: not made by this tool; plan again",
                                storage.full(rel))  # fmt: skip
    return record


def plan_id_time(plan_id: str) -> float:
    """The time a plan id spells (`cleanup.new_plan_id`: `YYYYmmddTHHMMSSmmmZ-<hex>`), in seconds."""
    stamp = plan_id[:15]
    seconds = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%S"))
    return seconds + int(plan_id[15:18]) / 1000


# Deletion began: written beside the checkpoint before the first delete, with the archive it was
# made with (its batch and query id), so that a run that finds files gone knows an earlier run of
# this plan deleted them, and which archive it made, whatever the trail says.


def _marker(checkpoint: Storage, plan: RetirementPlan) -> tuple[Storage, str]:
    storage, folder = _place(checkpoint)
    return storage, f"{folder}/{plan.plan_id}.deleting"


def mark_deleting(checkpoint: Storage, plan: RetirementPlan, at: float, archived: dict | None) -> None:
    storage, rel = _marker(checkpoint, plan)
    kept = None if archived is None else {k: archived[k] for k in ("archive", "batch", "query_id")}
    data = json.dumps({"plan_id": plan.plan_id, "at": at, "archived": kept}).encode()
    try:
        storage.write_if_absent(rel, data, MAINT_TEMP_PREFIX)
    except FileExistsError:  # an earlier run of this plan began
        pass


def deletion_began(checkpoint: Storage, plan: RetirementPlan) -> dict | None:
    """The marker of this plan's deletion (`archived`: the archive it made), or None before it."""
    storage, rel = _marker(checkpoint, plan)
    data = storage.read_if_exists(rel, limit=_RECORD_LIMIT)
    if data is None:
        return None
    try:
        marker = json.loads(data)
        if not isinstance(marker, dict) or marker.get("plan_id") != plan.plan_id:
            raise ValueError("not this plan's")
        archived = marker.get("archived")
        if archived is not None and not (
            isinstance(archived, dict) and isinstance(archived.get("query_id"), str)
        ):
            raise ValueError("its archive is not named")
        return marker
    except (json.JSONDecodeError, *MALFORMED) as exc:
        raise RetirementRefused(f"the marker of this plan's deletion is unreadable ({exc}): look at it; "
                                "nothing more deleted", storage.full(rel)) from exc  # fmt: skip
