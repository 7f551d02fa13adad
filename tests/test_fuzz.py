"""Fuzzing of every reader from real files, with a fixed seed and a bounded count (`bench/fuzz.py`
runs the long one). Any exception but a refusal (CheckpointError) fails: a traceback is a bug."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings

from checkpoint.format.layout import AUDIT_FOLDER, FileKind, classify
from testbed.fuzzing import TARGETS, check, seeds
from testbed.mutation import EXAMPLES, mutate, mutations
from tests.support.cli import ckpt
from tests.support.files import files_of


@pytest.fixture(scope="module")
def real(corpus) -> dict[str, bytes]:
    return seeds(corpus["watermark"])


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_reader_given_damaged_bytes_refuses_or_reads_never_crashes(real, target: str) -> None:
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(mutations())
    def fuzz(changes) -> None:
        check(target, mutate(real[target], changes))

    check(target, real[target])  # the seed itself reads
    fuzz()


KINDS = ["commit", "offset", "operator_metadata", "zip", "changelog", "sidecar"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_command_on_a_damaged_checkpoint_answers_in_one_line(copy_of, tmp_path, kind: str) -> None:
    """Through the command a user types: a real checkpoint with one file damaged as the fuzzer
    damages it. Exit 0, 1 or 2, at most one line on stderr, never a traceback, under a 1 GiB
    address-space limit, and nothing written but a plan in the audit trail beside it."""
    path = copy_of("watermark")
    wanted = {"commit": FileKind.COMMIT, "offset": FileKind.OFFSET, "zip": FileKind.ZIP,
              "operator_metadata": FileKind.OPERATOR_METADATA, "changelog": FileKind.CHANGELOG,
              "sidecar": FileKind.SPARK_CRC}[kind]  # fmt: skip
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and classify(p.relative_to(path).as_posix()).kind == wanted)  # fmt: skip
    rng = random.Random(f"{kind}-37")  # fixed: the same damage every run
    victim = files[-1]
    changes = [(rng.randrange(7), rng.randrange(1 << 20), rng.randrange(256)) for _ in range(3)]
    victim.write_bytes(mutate(victim.read_bytes(), changes))
    for args in (["validate", str(path), "--deep"], ["gc", str(path)], ["lineage", str(path)]):
        before = files_of(tmp_path)
        out = ckpt(*args, address_space=1 << 30)
        assert out.returncode in (0, 1, 2), (args, out.returncode, out.stderr[-2000:])
        one_line = "Traceback" not in out.stderr and out.stderr.strip().count("\n") == 0
        assert one_line, (args, out.stderr[-2000:])
        after = files_of(tmp_path)
        written = {rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel)}
        assert all(rel.startswith(f"{AUDIT_FOLDER}/") for rel in written), (args, sorted(written)[:5])
