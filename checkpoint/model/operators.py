"""A checkpoint's stateful operators: from their metadata files (Spark writes them since 3.5),
else from their state folders and the commit log."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.errors import CheckpointError, CorruptFileError
from checkpoint.format import OperatorMetadata, parse_operator_metadata

DEFAULT_STORE = "default"


@dataclass(frozen=True)
class FileProblem:
    """A file the tolerant load could not parse (strict loads raise instead)."""

    rel: str
    error: CheckpointError


@dataclass(frozen=True)
class Operator:
    id: int
    name: str | None
    store_names: tuple[str, ...]
    num_partitions: int | None
    metadata: OperatorMetadata | None


def metadata_parser(operator: int | None):
    """A parser of the operator metadata in `operator`'s folder that checks it names that one."""

    def parse(data: bytes, path: str) -> OperatorMetadata:
        meta = parse_operator_metadata(data, path)
        if meta.operator_id != operator:
            raise CorruptFileError(f"operator metadata names operator {meta.operator_id}", path)
        return meta

    return parse


def operators_of(
    metadata, files, commits, problems: list[FileProblem], *, strict: bool
) -> dict[int, Operator]:
    """Operators from their metadata (the newest v2 file wins over v1), else from the state folders."""
    newest: dict[int, tuple[int, OperatorMetadata]] = {}
    for f, meta in metadata:
        rank = -1 if f.what.batch is None else f.what.batch
        if f.what.operator not in newest or rank > newest[f.what.operator][0]:
            newest[f.what.operator] = (rank, meta)
    op_ids = set(newest)
    op_ids |= {f.what.operator for f in files if f.what.operator is not None}
    for c in commits.values():
        op_ids |= set(c.state_unique_ids or ())
    out = {}
    for op in sorted(op_ids):
        if op in newest:
            meta = newest[op][1]
            names = tuple(s.name for s in meta.stores)
            parts = max((s.num_partitions for s in meta.stores), default=None)
            out[op] = Operator(op, meta.name, names, parts, meta)
            continue
        try:
            out[op] = _operator_without_metadata(op, files, commits)
        except CheckpointError as exc:
            if strict:
                raise
            problems.append(FileProblem(f"state/{op}/_metadata/metadata", exc))
    return out


def _operator_without_metadata(op: int, files, commits) -> Operator:
    # Spark writes operator metadata since 3.5; older or damaged checkpoints may lack it. The store
    # order is then known only when there is a single store.
    names = sorted({f.what.store for f in files if f.what.operator == op and f.what.partition is not None})
    parts = {f.what.partition for f in files if f.what.operator == op and f.what.partition is not None}
    widths = {len(p) for c in commits.values() for p in (c.state_unique_ids or {}).get(op, ())}
    if len(names) > 1 and widths and max(widths) > 1:
        raise CheckpointError(
            f"operator {op} has stores {names} but no operator metadata: their commit-log order is unknown",
            f"state/{op}",
        )
    return Operator(op, None, tuple(names) or (DEFAULT_STORE,), (max(parts) + 1) if parts else None, None)
