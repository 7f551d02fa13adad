"""Dagster resources: where the checkpoints live, and the Spark that rebuilds their state.

Resources only translate configuration into the core's objects; the work happens in `checkpoint/`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import dagster as dg
from pydantic import ConfigDict, Field, model_validator

from assets.partitions import parse_partition_key, partition_key
from checkpoint.compaction import CompactionPlan, CompactionPlanOptions, plan_compaction
from checkpoint.errors import CheckpointError, LeaseHeld
from checkpoint.model import (
    Checkpoint,
    FoundCheckpoint,
    Listing,
    find_checkpoints,
    load_checkpoint,
    load_head,
)
from checkpoint.policy import POLICY, Policy, duration_text, parse_duration
from checkpoint.safety import AuditTrail, InPlace, Lease, TwoSided, lease_for
from checkpoint.storage import Storage, credentials_in, refuse_userinfo, scheme_of

StepContext = dg.OpExecutionContext | dg.AssetExecutionContext


def refuse_credentials(options: Any, where: str) -> None:
    """Dagster keeps a resource's configuration in every run's job snapshot and shows it to every
    UI user: a credential there is a credential published. They come from the environment. The
    message names where the credential sits, never its value."""
    found = credentials_in(options)
    if found:
        raise ValueError(
            f"{where} holds a credential ({', '.join(found)}): Dagster would store it with every run and "
            "show it in its UI. Give it through botocore's chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a "
            "profile, an instance role) or the file system's own environment variables, or set it with "
            "dagster.EnvVar in a resource of your own"
        )


def _refuse_userinfo(url: str | None, where: str) -> None:
    try:
        refuse_userinfo(url or "", where)
    except CheckpointError as exc:
        raise ValueError(str(exc)) from None


def fixed(resource: dg.ConfigurableResource) -> dg.ResourceDefinition:
    """A resource as the deployment set it, taking no run config: a Launchpad run that tries to
    set any field (another root, another Spark, a conf) fails its config check before anything
    runs, and no job snapshot holds its values."""
    return dg.ResourceDefinition(
        resource_fn=lambda _: resource, config_schema=dg.Shape({}), description="Fixed by the deployment"
    )


# pydantic's validation errors echo the input, and Dagster shows them wherever the code location's
# load error is shown: a refused credential would be printed by the refusal.
_HIDE_INPUT = ConfigDict(hide_input_in_errors=True)


class CheckpointRoot(dg.Config):
    """A folder (a path, or a URL on a proven store: docs/storage.md) under which checkpoints are
    found at any depth."""

    model_config = _HIDE_INPUT

    name: str = Field(description="Short, stable name: the first part of every partition key under it")
    url: str = Field(
        description="file:///..., s3://bucket/prefix, az://container/prefix or gs://bucket/prefix"
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="Passed to fsspec (e.g. endpoint_url, anon); never logged"
    )
    apply_cleanup: bool = Field(
        default=False, description="Scheduled cleanup deletes orphans here; otherwise it only plans"
    )
    maintenance_cron: str = Field(
        default=POLICY.maintenance_cron, description="When the scheduled maintenance pass runs for this root"
    )

    @model_validator(mode="after")
    def _no_credentials(self) -> CheckpointRoot:
        refuse_credentials(self.storage_options, f"the storage_options of root {self.name!r}")
        _refuse_userinfo(self.url, f"the url of root {self.name!r}")
        return self

    queries_stopped: bool = Field(
        default=False,
        description="The queries under this root are stopped, not merely idle: cleanup may use the "
        "stopped-query rules once their logs are older than the quiet period (otherwise the live rules)",
    )


def quiet_period_field() -> Any:
    """A Launchpad run's `quiet_period`, which `CheckpointRootsResource.quiet_seconds_at_least` reads:
    it may lengthen the deployment's, never shorten it."""
    return Field(default=None, description="Refuse when a commit or offset is younger than this (the query "
                 "may be running); longer than the deployment's quiet_period or ignored: a run only "
                 "narrows")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Site:
    """One checkpoint a partition key names, resolved once (`CheckpointRootsResource.site`): its
    configured root, its path under it, its storage with the root's options, and its audit trail.
    The storage is opened when first asked for, as it was before there was a site: a trail at the
    deployment's `audit_url` never opens it. Sites resolved together (a tick, the fleet view) share
    their root's opened storage, and with it its client."""

    key: str
    root: CheckpointRoot
    rel: str  # "" for a root that is itself a checkpoint
    audit_url: str | None  # the deployment's; None: beside the checkpoint
    audit_options: dict[str, Any] | None
    opened: Storage | None = dataclasses.field(default=None, compare=False, repr=False)  # the root's

    @functools.cached_property
    def storage(self) -> Storage:
        return (self.opened or Storage(self.root.url, self.root.storage_options)).child(self.rel)

    @property
    def trail(self) -> AuditTrail:
        """Where its plans and records go. Raises CheckpointError for a checkpoint at the top of a
        bucket when the deployment names no `audit_url`: there is no folder beside it."""
        return AuditTrail(self.audit_url or AuditTrail.default_for(self.storage.url), self.audit_options)


class CheckpointRootsResource(dg.ConfigurableResource):
    """What maintenance may touch and the floors it keeps. Set by the deployment only: the code
    location wraps it in `fixed` so that no run's config can name another root, storage options,
    audit location, grace, quiet period or retention (docs/safety.md, "run config narrows")."""

    model_config = _HIDE_INPUT

    roots: list[CheckpointRoot]
    long_chain_threshold: int = Field(
        default=POLICY.long_chain, description="Warn, and compact, from this many changelogs replayed"
    )
    grace: str = Field(
        default=duration_text(POLICY.grace_seconds),
        description="Cleanup: only files older than this "
        f"({duration_text(POLICY.min_grace_seconds)} at least)",
    )
    retain_batches: int | None = Field(default=None, description="Cleanup: keep the last N committed batches")
    quiet_period: str = Field(
        default=duration_text(POLICY.quiet_seconds), description="A commit newer than this marks a query live"
    )
    audit_url: str | None = Field(
        default=None, description="Plans and outcomes; default _ckpt_audit beside each"
    )
    dormant_after: str = Field(
        default=duration_text(POLICY.dormant_seconds),
        description="A checkpoint with no commit and no offset for this long is dormant: the commit sensor "
        "looks at it rarely, the fleet view shows it",
    )
    retire_grace: str = Field(
        default=duration_text(POLICY.retire_grace_seconds),
        description="Retirement: a plan is applied no sooner than this after it was made "
        f"({duration_text(POLICY.min_retire_grace_seconds)} at least)",
    )
    target_spark: str | None = Field(
        default=None,
        description="The fleet view also tells whether this Spark (4.0 to 4.3) restarts each checkpoint",
    )
    audit_storage_options: dict[str, Any] | None = Field(
        default=None, description="For audit_url; default: the options of the checkpoint's root"
    )
    lease_wait: str = Field(
        default=duration_text(POLICY.lease_wait_seconds),
        description="How long a step waits for a checkpoint's maintenance lease held elsewhere",
    )
    lease_retries: int = Field(
        default=POLICY.lease_retries,
        description="Then how many times the step is retried "
        f"({duration_text(POLICY.lease_retry_delay_seconds)} apart) before it fails",
    )
    unsafe_floors: bool = Field(
        default=False,
        description=f"Accept a grace below {duration_text(POLICY.min_grace_seconds)} or a quiet period below "
        f"{duration_text(POLICY.min_quiet_seconds)}: only where nothing writes to the checkpoints",
    )

    @model_validator(mode="after")
    def _above_the_floors(self) -> CheckpointRootsResource:
        refuse_credentials(self.audit_storage_options, "audit_storage_options")
        _refuse_userinfo(self.audit_url, "audit_url")
        if self.unsafe_floors:
            return self
        orphans = "a running query's files could be taken for orphans"
        floors = (("grace", self.grace, POLICY.min_grace_seconds, orphans),
                  ("quiet_period", self.quiet_period, POLICY.min_quiet_seconds, orphans),
                  ("retire_grace", self.retire_grace, POLICY.min_retire_grace_seconds,
                   "a team would have no time to object to a retirement"),
                  ("dormant_after", self.dormant_after, POLICY.min_dormant_seconds,
                   "a query that committed in the last day would be planned for retirement"))  # fmt: skip
        for name, value, floor, why in floors:
            if parse_duration(value) < floor:
                raise ValueError(f"{name} {value} is below the floor of {duration_text(floor)}: {why} (set "
                                 "unsafe_floors only where nothing writes to the checkpoints)")  # fmt: skip
        return self

    def quiet_seconds_at_least(self, asked: str | None) -> float:
        """A run may ask for a longer quiet period than the deployment's, never a shorter one."""
        mine = parse_duration(self.quiet_period)
        return max(mine, parse_duration(asked)) if asked else mine

    def under_a_root(self, url: str) -> str:
        """The partition key of `url`; raises CheckpointError when it lies under no configured root
        (a destination a run names must be one the deployment allows)."""
        key = self.key_of(url)
        if key is None:
            names = ", ".join(f"{r.name} ({r.url})" for r in self.roots)
            raise CheckpointError(f"{url} lies under no configured root ({names}): add a root for it to "
                                  "the deployment")  # fmt: skip
        return key

    def root(self, name: str) -> CheckpointRoot:
        for root in self.roots:
            if root.name == name:
                return root
        raise CheckpointError(f"no configured checkpoint root named {name!r}")

    def storage(self, name: str) -> Storage:
        root = self.root(name)
        return Storage(root.url, root.storage_options)

    def discover(self, name: str) -> dict[str, FoundCheckpoint]:
        """Partition key -> checkpoint, for every checkpoint under one root (shallow listings that
        stop at each checkpoint)."""
        return {partition_key(name, f.rel): f for f in find_checkpoints(self.storage(name))}

    def site(self, key: str, opened: Mapping[str, Storage] | None = None) -> Site:
        """The checkpoint a partition key names, resolved once (`Site`): the one place a key is
        parsed. `opened`: the roots' storages by name, opened once for many sites. Raises
        ValueError for a key that is no partition key, CheckpointError for a root that is not
        configured."""
        name, rel = parse_partition_key(key)
        root = self.root(name)
        shared = (opened or {}).get(name)
        return Site(key, root, rel, self.audit_url, self.audit_options(name), shared)

    def opened(self) -> dict[str, Storage]:
        """Every configured root's storage, opened once, for `site` to share among many keys."""
        return {root.name: self.storage(root.name) for root in self.roots}

    def checkpoint_storage(self, key: str) -> Storage:
        """The storage of the checkpoint a partition key names."""
        return self.site(key).storage

    def audit_trail(self, key: str) -> AuditTrail:
        """Where a checkpoint's plans and outcomes go; the root's credentials reach it unless told."""
        return self.site(key).trail

    def audit_options(self, root_name: str) -> dict[str, Any] | None:
        """The storage options of the audit trails of a root's checkpoints: `audit_storage_options`,
        else the root's own where the trail is on the same store (beside each checkpoint, it is)."""
        if self.audit_storage_options is not None:
            return self.audit_storage_options
        root = self.root(root_name)
        same_store = scheme_of(self.audit_url or root.url) == scheme_of(root.url)
        return root.storage_options if same_store else {}

    def in_place(
        self, context: StepContext, key: str, *, retry: bool = True, keeps_records: bool = False
    ) -> InPlace:
        """The request of a step that changes the checkpoint `key`. Its door takes the checkpoint's
        maintenance lease for this run's step: it waits `lease_wait` while another action (a CLI
        run, another deployment) holds it, then retries the step, then fails naming the holder;
        without `retry`, raises LeaseHeld after the wait. Nothing is planned or written without it.
        The door of an action that `keeps_records` carries the checkpoint's trail (`Site.trail`)."""
        site = self.site(key)
        return InPlace(
            site.storage,
            lambda storage, what: self.take_lease_at(context, storage, what, key, retry=retry),
            site.trail if keeps_records else None,
        )

    def two_sided(
        self, context: StepContext, source: str, destination: str, *, keeps_records: bool = False
    ) -> tuple[TwoSided, str]:
        """The request of a step that writes `destination` (a URL a run names) from the checkpoint
        `source` (a partition key), its leases taken as `in_place` takes one, and the destination's
        partition key. Raises CheckpointError when the destination lies under no configured root: a
        run cannot send state to a place, or with credentials, of its own choosing. The door of an
        action that `keeps_records` carries the source's trail."""
        dest_key = self.under_a_root(destination)

        def take(storage: Storage, what: str) -> Lease:
            return self.take_lease_at(context, storage, what, self.key_of(storage.url) or "")

        site = self.site(source)
        trail = site.trail if keeps_records else None
        return TwoSided(site.storage, self.checkpoint_storage(dest_key), take, trail), dest_key

    def take_lease_at(
        self, context: StepContext, storage: Storage, what: str, label: str = "", *, retry: bool = True
    ) -> Lease:
        """The lease `in_place` takes, for any checkpoint, one under no configured root too (a
        fork's destination). The lease lives beside the checkpoint whatever `audit_url` says, where
        the CLI and every other deployment look for it."""
        lease = lease_for(storage, f"dagster run {context.run.run_id} ({what})")
        try:
            return lease.acquire(wait=parse_duration(self.lease_wait))
        except LeaseHeld as exc:
            if not retry:
                raise
            if context.retry_number < self.lease_retries:
                delay = duration_text(POLICY.lease_retry_delay_seconds)
                context.log.warning(f"{label or storage.url}: {exc}; retrying in {delay}")
                raise dg.RetryRequested(
                    max_retries=self.lease_retries, seconds_to_wait=POLICY.lease_retry_delay_seconds
                ) from exc
            raise dg.Failure(description=f"{label or storage.url}: {exc}") from exc

    def key_of(self, url: str, storage_options: dict[str, Any] | None = None) -> str | None:
        """The partition key of a checkpoint at `url` when it lies under a configured root, else None."""
        where = Storage(url, storage_options)
        for root in self.roots:
            top = self.storage(root.name)
            if where.protocol == top.protocol and where.root.startswith(top.root.rstrip("/") + "/"):
                return partition_key(root.name, where.root[len(top.root.rstrip("/")) + 1 :])
        return None

    def policy(self) -> Policy:
        """The shared defaults with this deployment's settings in place."""
        return dataclasses.replace(
            POLICY,
            long_chain=self.long_chain_threshold,
            grace_seconds=parse_duration(self.grace),
            quiet_seconds=parse_duration(self.quiet_period),
            dormant_seconds=parse_duration(self.dormant_after),
        )

    def compaction_plan_options(self) -> CompactionPlanOptions:
        """This deployment's chain threshold and quiet period: what the compaction asset plans by
        and what the commit sensor decides by (`compaction_plan`), so the two never disagree."""
        policy = self.policy()
        return CompactionPlanOptions(min_chain=policy.long_chain, quiet_seconds=policy.quiet_seconds)

    def compaction_plan(self, ckpt: Checkpoint) -> CompactionPlan:
        """The compaction asset's plan of `ckpt`. Raises CompactionRefused on error findings."""
        return plan_compaction(ckpt, self.compaction_plan_options())

    def url_of(self, key: str) -> str:
        return self.checkpoint_storage(key).url

    def load(self, key: str, *, strict: bool = False, **head: Any) -> Checkpoint:
        """Head-first (`model.head.load_head`): the logs and what recovery reads, no state listing."""
        return load_head(self.checkpoint_storage(key), strict=strict, **head)

    def load_listed(self, key: str) -> Checkpoint:
        """Every file (cleanup planning), read strictly; on object stores one listing per state
        partition, concurrently."""
        return load_checkpoint(self.checkpoint_storage(key), listing=Listing.AUTO)


def roots_from_env() -> list[CheckpointRoot]:
    """`CKPT_ROOTS`: a JSON list of {name, url, storage_options}. Required: a deployment that
    forgot it must not quietly watch some default folder."""
    raw = os.environ.get("CKPT_ROOTS")
    if not raw:
        raise CheckpointError(
            'CKPT_ROOTS is not set: give the roots to maintain as JSON, e.g. [{"name": "prod", "url": '
            '"s3://bucket/streams"}] (`make ui` sets the demo\'s)'
        )
    try:
        return [CheckpointRoot(**r) for r in json.loads(raw)]
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"CKPT_ROOTS is not a JSON list of roots: {exc}") from exc


class SparkResource(dg.ConfigurableResource):
    """The Spark that runs rebuild jobs: local by default, any master, or a Spark Connect remote.
    Set by the deployment only (`fixed`): a run's config cannot choose which cluster reads and
    writes the state, and credentials (s3a keys, a Connect token) come from the environment,
    never from a value Dagster stores."""

    model_config = _HIDE_INPUT

    master: str = Field(default=POLICY.spark_master, description="e.g. local[*], spark://host:7077, yarn")
    remote: str | None = Field(default=None, description="Spark Connect URL (sc://host:15002), over master")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark conf")

    @model_validator(mode="after")
    def _no_credentials(self) -> SparkResource:
        refuse_credentials(self.conf, "the Spark conf")
        if self.remote and re.search(r";\s*token\s*=|://[^/]*@", self.remote, re.IGNORECASE):
            raise ValueError(
                "the Spark Connect URL carries a token or a user: give it through the environment "
                "(SPARK_CONNECT_AUTHENTICATE_TOKEN, read by PySpark's Connect client), never in the "
                "deployment's configuration"
            )
        return self

    def session(self):
        from jobs.spark_session import session_for

        return session_for(self.master, self.remote, self.conf)
