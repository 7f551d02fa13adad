"""Where the project is, for tests at any depth of `tests/`."""

from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
