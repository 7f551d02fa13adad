"""The project's own documents: generated parts agree with the code, links resolve, the README
stays a newcomer's page, every package is named in the architecture, and nothing points outside
the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from testbed import docs

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"(?m)^#+ (.+)$", page.read_text())}


@pytest.mark.parametrize("page", sorted(docs.GENERATED))
def test_generated_parts_agree_with_the_code(page: str) -> None:
    assert (docs.DOCS / page).read_text() == docs.rendered(page), f"run python -m testbed.docs ({page})"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or (
            anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)
        ):
            broken.append(target)
    assert broken == []


def test_the_readme_is_a_newcomers_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 400
    assert "make demo" in text and "make test" in text


def test_the_architecture_names_every_package() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = [p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()]
    core = [f"checkpoint.{p.name}" for p in (ROOT / "checkpoint").iterdir() if (p / "__init__.py").exists()]
    modules = [f"checkpoint.{p.stem}" for p in (ROOT / "checkpoint").glob("*.py") if p.stem != "__init__"]
    missing = [name for name in packages + core + modules if f"`{name}`" not in text]
    assert len(core) >= 9 and missing == []


def test_nothing_points_outside_the_repository() -> None:
    """The rules the code cites are the project's own (docs/), not a folder beside the clone."""
    elsewhere = re.compile("|".join(("shared" + "/docs", r"\.\./" + "shared")))
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True)
    files = [ROOT / name for name in tracked.stdout.split()] + [Path(__file__)]
    assert [f.name for f in files if f.is_file() and elsewhere.search(f.read_text(errors="replace"))] == []
