"""The deployment fixture starts each of the recipe's processes as a script's shell would, so that
the end-to-end test's stop is the recipe's stop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from testbed.deployment import _as_a_script_starts

_IGNORED = (
    "import json, signal; "
    "print(json.dumps([s.name for s in signal.Signals if signal.getsignal(s) is signal.SIG_IGN]))"
)


def _ignored_in_child(command: list[str], parent_ignores: bool) -> set[str]:
    """What a process started with `command`'s start-up ignores, where the process that starts it
    ignores SIGINT or not (a bench run in the background does)."""
    _, before = _as_a_script_starts(command)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN if parent_ignores else signal.default_int_handler)
    try:
        child = [sys.executable, "-c", _IGNORED]
        out = subprocess.run(child, preexec_fn=before, capture_output=True, text=True, check=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("parent_ignores", [False, True])
def test_a_restored_signal_is_at_its_default_whatever_the_parent_ignores(parent_ignores: bool) -> None:
    """The code server's line restores SIGINT and SIGQUIT: ignored from a background parent
    before, its SIGTERM was ignored too, and it outlived the stop for good."""
    restored = ["env", "--default-signal=INT,QUIT", "dagster", "code-server", "start"]
    assert _as_a_script_starts(restored)[0] == ["dagster", "code-server", "start"]
    assert {"SIGINT", "SIGQUIT"}.isdisjoint(_ignored_in_child(restored, parent_ignores))


@pytest.mark.parametrize("parent_ignores", [False, True])
def test_a_plain_background_command_starts_with_sigint_and_sigquit_ignored(parent_ignores: bool) -> None:
    assert {"SIGINT", "SIGQUIT"} <= _ignored_in_child(["dagster-daemon", "run"], parent_ignores)
