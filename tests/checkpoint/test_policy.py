"""One policy object holds the defaults: every entry point reads it, and a finding and the action it
triggers use the same threshold."""

from __future__ import annotations

import dataclasses
import re

import humanfriendly
import pytest

from checkpoint.analysis.checks import ValidationOptions, validate
from checkpoint.cleanup.plan import GcPlanOptions
from checkpoint.cleanup.rules import GcOptions
from checkpoint.compaction.targets import CompactionPlanOptions, plan_compaction
from checkpoint.model.head import load_head
from checkpoint.policy import POLICY, Policy, duration_text, parse_duration
from tests.support.paths import PROJECT


def test_the_core_takes_its_defaults_from_the_policy() -> None:
    """(The CLI's and Dagster's: tests/test_entry_points.py.)"""
    assert ValidationOptions().long_chain_threshold == POLICY.long_chain
    assert ValidationOptions().header_cap_ratio == POLICY.header_cap_ratio
    assert CompactionPlanOptions().min_chain == POLICY.long_chain
    assert CompactionPlanOptions().quiet_seconds == POLICY.quiet_seconds
    assert CompactionPlanOptions().header_cap_ratio == POLICY.header_cap_ratio
    assert GcPlanOptions().grace_seconds == GcOptions().grace_seconds == POLICY.grace_seconds
    assert GcPlanOptions().quiet_seconds == POLICY.quiet_seconds


def _shown(name: str, value) -> str:
    if name.endswith("_seconds"):
        return duration_text(value)
    if name.endswith("_bytes"):
        return humanfriendly.format_size(value, binary=True)
    return str(value)


def test_the_configuration_page_lists_every_default_of_the_policy() -> None:
    text = (PROJECT / "docs" / "configuration.md").read_text()
    table = text.split("<!-- policy table: tests/checkpoint/test_policy.py -->", 1)[1].split(
        "<!-- end of policy table", 1
    )[0]
    listed = dict(re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", table, re.MULTILINE))
    assert listed == {f.name: _shown(f.name, getattr(POLICY, f.name)) for f in dataclasses.fields(Policy)}


@pytest.mark.parametrize("seconds", [90, 15 * 60, 3600, 6 * 3600, 2 * 86400, 1.5])
def test_durations_read_back(seconds) -> None:
    assert parse_duration(duration_text(seconds)) == seconds


@pytest.mark.parametrize("threshold", [10, 32, 33])
def test_the_long_chain_warning_and_compaction_agree(corpus, threshold) -> None:
    ckpt = load_head(str(corpus["long_chain"]), recent=2)  # 32 changelogs per store
    warned = {
        f.path
        for f in validate(ckpt, ValidationOptions(long_chain_threshold=threshold)).findings
        if f.code == "LONG_REPLAY_CHAIN"
    }
    targets = plan_compaction(ckpt, CompactionPlanOptions(min_chain=threshold, quiet_seconds=0)).targets
    assert bool(warned) == bool(targets) == (threshold <= 32)


def test_the_header_near_cap_error_and_the_rescue_agree(rescue) -> None:
    # The rescue checkpoint's headers sit above the ratio; one notch above them, neither fires.
    # Real queries write it on a cold cache: a fixture of the corpus tier, not a unit test.
    ckpt = load_head(str(rescue / "checkpoint"), strict=False, recent=2)
    ratio = max(e.header_cap_ratio for e in validate(ckpt).lineage)
    assert ratio >= POLICY.header_cap_ratio
    for policy in (POLICY, dataclasses.replace(POLICY, header_cap_ratio=ratio + 0.01)):
        options = ValidationOptions(header_cap_ratio=policy.header_cap_ratio)
        errs = [f for f in validate(ckpt, options).findings if f.code == "LINEAGE_HEADER_NEAR_CAP"]
        planned = plan_compaction(
            ckpt, CompactionPlanOptions(header_cap_ratio=policy.header_cap_ratio)
        ).targets
        rescues = [t for t in planned if t.reason == "lineage_header_near_cap"]
        assert bool(errs) == bool(rescues) == (policy is POLICY)
