"""The generated parts of `docs/`: `python -m testbed.docs` rewrites them from the code, and
`tests/test_docs.py` fails when a page and the code disagree."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def findings_table() -> str:
    """Every finding code validation knows, in the order it checks them."""
    from checkpoint.analysis import CODES

    rows = ["| code | severity | check | meaning |", "|---|---|---|---|"]
    rows += [f"| `{c.name}` | {c.severity.value} | {c.category.value} | {c.summary} |"
             for c in CODES.values()]  # fmt: skip
    return "\n".join(rows) + "\n"


def conditions_table() -> str:
    """Every Spark error condition a rehearsal explains, with its cause and remedy."""
    from checkpoint.rehearsal import CONDITIONS

    rows = ["| condition | cause | remedy |", "|---|---|---|"]
    rows += [f"| `{name}` | {cause} | {remedy} |" for name, (cause, remedy) in CONDITIONS.items()]
    return "\n".join(rows) + "\n"


def readiness_table() -> str:
    """Every upgrade-readiness rule: what the metadata shows, which Spark refuses it, and the
    rehearsals that proved it (`tests/cli/test_readiness.py`)."""
    from checkpoint.analysis import NO_RULE_PROOF, ONE_WAY, RULES

    head = ("rule", "the checkpoint's metadata shows", "does not restart under", "Spark says", "remedy",
            "proven by a rehearsal")  # fmt: skip
    rows = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    cells = [(f"`{r.key}`", r.shows, ", ".join(r.refused_by), r.spark_says, r.remedy, r.proof) for r in RULES]
    rows += ["| " + " | ".join(c) + " |" for c in cells]
    rest = f"(restarts under 4.0 to 4.3; format V2 under 4.0 restarts {ONE_WAY})"
    rows.append(f"| none | none of the above | {rest} | | | {NO_RULE_PROOF} |")
    return "\n".join(rows) + "\n"


# page -> (marker, renderer): the text between `<!-- generated: <marker> -->` and `<!-- end -->`
GENERATED = {"findings.md": ("findings", findings_table), "rehearse.md": ("conditions", conditions_table),
             "format.md": ("readiness", readiness_table)}  # fmt: skip


def _block(marker: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {marker} [^>]*-->\n)(.*?)(<!-- end -->)", re.S)


def rendered(page: str) -> str:
    """The page as it should read, its generated block rendered again."""
    marker, render = GENERATED[page]
    text = (DOCS / page).read_text()
    if not _block(marker).search(text):
        raise ValueError(f"docs/{page} has no generated block {marker!r}")
    return _block(marker).sub(lambda m: m.group(1) + render() + m.group(3), text)


def main() -> None:
    for page in GENERATED:
        (DOCS / page).write_text(rendered(page))


if __name__ == "__main__":
    main()
