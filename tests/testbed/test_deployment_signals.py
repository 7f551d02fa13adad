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


def _ignored_in_child(command: list[str], parent_ignores: tuple[signal.Signals, ...]) -> set[str]:
    """What a process started with `command`'s start-up ignores, where the process that starts it
    ignores `parent_ignores` (a bench run in the background ignores SIGINT)."""
    _, before = _as_a_script_starts(command)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in parent_ignores}
    try:
        child = [sys.executable, "-c", _IGNORED]
        out = subprocess.run(child, preexec_fn=before, capture_output=True, text=True, check=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("spelled", ["=INT,QUIT", "=SIGINT,SIGQUIT", "=int,quit", "=2,3", "=2,3,35", ""])
@pytest.mark.parametrize("parent_ignores", [(), (signal.SIGINT, signal.SIGQUIT)])
def test_a_restored_signal_is_at_its_default_whatever_the_parent_ignores(spelled, parent_ignores) -> None:
    """The code server's line restores SIGINT and SIGQUIT: ignored from a background parent
    before, its SIGTERM was ignored too, and it outlived the stop for good. Each spelling GNU env
    takes restores them (none named: every signal)."""
    restored = ["env", f"--default-signal{spelled}", "dagster", "code-server", "start"]
    assert _as_a_script_starts(restored)[0] == ["dagster", "code-server", "start"]
    assert {"SIGINT", "SIGQUIT"}.isdisjoint(_ignored_in_child(restored, parent_ignores))


def test_a_restored_signal_other_than_the_shells_is_restored_too() -> None:
    restored = ["env", "--default-signal=INT,TERM", "dagster", "code-server", "start"]
    ignored = _ignored_in_child(restored, (signal.SIGTERM,))
    assert "SIGTERM" not in ignored and "SIGINT" not in ignored and "SIGQUIT" in ignored


@pytest.mark.parametrize("spelled", ["=INT,NOSUCH", "=", "=99999", "s=INT"])
def test_a_signal_env_would_not_take_is_refused(spelled: str) -> None:
    with pytest.raises(ValueError, match="signal"):
        _as_a_script_starts(["env", f"--default-signal{spelled}", "dagster"])


@pytest.mark.parametrize("parent_ignores", [(), (signal.SIGINT,)])
def test_a_plain_background_command_starts_with_sigint_and_sigquit_ignored(parent_ignores) -> None:
    assert {"SIGINT", "SIGQUIT"} <= _ignored_in_child(["dagster-daemon", "run"], parent_ignores)
