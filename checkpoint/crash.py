"""One hook for the crash tests: a process kills itself with SIGKILL at a named point, as kill -9,
an OOM kill or a power loss would end it there, so that a test can prove what the next run finds.

`CKPT_CRASH_AT` names the point: `<point>` (the first time it is reached) or `<point>:<value>`
(when it is reached at that value or past it: a count, a step; or at that very name: a store).
Unset, a point costs one environment lookup. The points:

- `cleanup.deleted:<n>`: once an apply has deleted n files, before their outcomes are recorded;
- `fork.after_step:<step>`: once a fork has written that step's files (0 state, 1 offsets, 2
  commits, 3 query metadata), before the next;
- `compaction.before_zip`: once a rebuild's SSTs are out, before its zip;
- `compaction.before_sidecar`: once a rebuild's zip is out, before its `.crc` (format V2);
- `compaction.task:<op>/<part>/<store>`: the Spark task rebuilding that store, as it starts;
- `migrate.after_store:<n>`: once a migration has written n stores' state, before the next (its
  logs are then written by the fork's steps, `fork.after_step`);
- `migrate.task:<op>/<part>/<store>`: the Spark task writing that store's state, as it starts;
- `purge.after_store:<n>`: once a purge of expired state has published n stores, before the next
  (or, after the last, before its audit record).
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "CKPT_CRASH_AT"


def spec() -> str:
    """What `CKPT_CRASH_AT` says here (for a process that hands it on, e.g. to Spark tasks)."""
    return os.environ.get(CRASH_ENV, "")


def crash_point(point: str, at: int | str | None = None, spec_: str | None = None) -> None:
    """SIGKILLs this process when the spec (`CKPT_CRASH_AT`, or `spec_` where it was handed on)
    names `point` and `at` reaches its value; see the module docstring."""
    wanted = spec() if spec_ is None else spec_
    if not wanted:
        return
    name, _, value = wanted.partition(":")
    if name != point:
        return
    if value and at is not None:
        reached = at >= int(value) if isinstance(at, int) else at == value
        if not reached:
            return
    os.kill(os.getpid(), signal.SIGKILL)
