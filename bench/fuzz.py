"""The long fuzz run, outside the test suite: every reader of checkpoint files given mutated bytes
of real files (testbed/fuzzing.py), many more times than the suite's bounded run.

    python -m bench.fuzz --examples 20000

Reports, per reader, how many inputs were tried and how many were read or refused; a crash (any
exception but a refusal) stops the run with the input that caused it and exit 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, given, settings

from checkpoint.errors import CheckpointError
from testbed.corpus import checkpoints, ensure_corpus
from testbed.fuzzing import TARGETS, seeds
from testbed.mutation import mutate, mutations


def _fuzzer(seed: bytes, read, tally: Counter[str], drawn, examples: int):
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(drawn)
    def fuzz(changes) -> None:
        try:
            read(mutate(seed, changes))
            tally["read"] += 1
        except CheckpointError:
            tally["refused"] += 1

    return fuzz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20_000, help="inputs per reader")
    parser.add_argument("--scenario", default="watermark", help="the corpus checkpoint seeding it")
    parser.add_argument("--only", nargs="*", choices=sorted(TARGETS), help="these readers (default: all)")
    args = parser.parse_args()
    real = seeds(checkpoints(ensure_corpus())[args.scenario])
    started = time.monotonic()
    for target in sorted(args.only or TARGETS):
        tally: Counter[str] = Counter()
        try:
            _fuzzer(real[target], TARGETS[target], tally, mutations(), args.examples)()
        except Exception as exc:  # noqa: BLE001 - the crash is the finding
            print(f"{target}: CRASH {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        tried = sum(tally.values())
        print(f"{target}: {tried} inputs, {tally['read']} read, {tally['refused']} refused, 0 crashes")
    print(f"no crash in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
