"""Where code outside `checkpoint/format/` still compares providers or format versions, instead
of asking the checkpoint's `StateFormat` (`checkpoint.format.states`)."""

from __future__ import annotations

import ast
from pathlib import Path

SHIPPED = ("checkpoint", "jobs", "assets", "orchestration", "cli")
_ATTRIBUTES = {"provider", "provider_class", "format_version"}
_NAMES = {"Provider", "provider", "format_version"}


def _names_a_format(node: ast.AST) -> bool:
    return any(
        (isinstance(sub, ast.Attribute) and sub.attr in _ATTRIBUTES)
        or (isinstance(sub, ast.Name) and sub.id in _NAMES)
        for sub in ast.walk(node)
    )


def format_branches(root: Path) -> list[str]:
    """`path:line: comparison` for each comparison with a provider or a format version on a side."""
    found = []
    for package in SHIPPED:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("checkpoint/format/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                sides = (node.left, *node.comparators) if isinstance(node, ast.Compare) else ()
                if any(map(_names_a_format, sides)):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found
