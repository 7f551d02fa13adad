"""Damage to bytes, as a disk, a partial write or a hostile hand does it: the mutations that the
suite's fuzzing of every reader (`tests/test_fuzz.py`) and its long run (`bench.fuzz`) apply to the
seeds of `testbed.fuzzing`, Hypothesis' strategy that draws them, and how many the suite draws."""

from __future__ import annotations

import os

# How many inputs the suite draws a reader (`bench.fuzz` draws many more).
EXAMPLES = int(os.environ.get("CKPT_FUZZ_EXAMPLES", "150"))

# A mutation: (kind, position, value). Positions wrap around the data; values are bytes or lengths.
Mutation = tuple[int, int, int]
_INTERESTING = (0x00, 0xFF, 0x7F, 0x80, ord("-"), ord("9"), ord("."), ord("/"), ord('"'), ord("\n"))


def mutate(data: bytes, mutations: list[Mutation]) -> bytes:
    """Flips, overwrites, inserts, deletes, truncates and duplicates: the damage a disk, a partial
    write or a hostile hand does."""
    out = bytearray(data)
    for kind, position, value in mutations:
        at = position % (len(out) + 1)
        k = kind % 7
        if k == 0 and out:
            out[at % len(out)] ^= 1 << (value % 8)
        elif k == 1 and out:
            out[at % len(out)] = _INTERESTING[value % len(_INTERESTING)]
        elif k == 2:
            out[at:at] = bytes([value % 256]) * (1 + value % 8)
        elif k == 3:
            del out[at : at + 1 + value % 16]
        elif k == 4:
            del out[at:]
        elif k == 5:
            out[at:at] = out[at : at + 1 + value % 64]
        else:  # digits: ids, sizes and versions grown absurd
            out[at:at] = b"9" * (1 + value % 40)
    return bytes(out)


def mutations():
    """Hypothesis' strategy for a list of one to six mutations."""
    from hypothesis import strategies as st

    return st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1 << 20), st.integers(0, 255)),
                    min_size=1, max_size=6)  # fmt: skip
