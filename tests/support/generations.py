"""Checkpoints the testbed's other PySparks wrote (`testbed.generations`), made restartable here."""

from __future__ import annotations

from pathlib import Path


def sources_moved_back(checkpoint: Path, scenario: Path) -> None:
    """A generation writes each corpus in a `.partial` folder that it renames when done, so the
    source logs of a copy in `checkpoint` name inputs that are gone; they are pointed back at the
    scenario's input folder, as a deployment's would name its own."""
    moved = (f"{scenario.parent.name}.partial/", f"{scenario.parent.name}/")
    for log in (checkpoint / "sources").rglob("*"):
        if not log.is_file():
            continue
        if log.name.startswith("."):  # Hadoop's checksum of the old bytes: it reads a file without one
            log.unlink()
        else:
            log.write_text(log.read_text().replace(*moved))
