"""The project's import graph (grimp, import-linter's own), for the rules no contract states."""

from __future__ import annotations

SHIPPED = ("checkpoint", "jobs", "assets", "orchestration", "cli")


def cycles(*packages: str) -> list[str]:
    """Every direct import `a -> b` where `b` also reaches `a`, at any depth: a cycle, named by its
    first edge. Imports made only for type checking count too: they are how cycles start."""
    import grimp

    graph = grimp.build_graph(*(packages or SHIPPED))
    return sorted(
        f"{a} -> {b}"
        for a in graph.modules
        for b in graph.find_modules_directly_imported_by(a)
        if graph.chain_exists(importer=b, imported=a)
    )
