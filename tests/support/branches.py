"""Where code outside `checkpoint/format/` still decides by the state format itself instead of
asking the checkpoint's `StateFormat` (`checkpoint.format.states`) a question it answers.

Six shapes are counted:
- a comparison with a provider, a format version, a state format or one of its kinds on a side
  (`states_at(b) != ckpt.states`, `ckpt.format_version == 2`, `x.provider is Provider.HDFS`,
  `recovery is LISTED`);
- a read of one of `StateFormat`'s own fields other than its provider, version and files: a flag
  is a branch by another name (`ckpt.states.in_rocksdb`);
- a test on whether a state file's name carries an id (`uid is None`, `f.unique_id is not None`):
  the V1/V2 split, asked of a name;
- a format's kind asked for booleans (`ByEngine(hdfs=True, rocksdb=False)`), or a selector that
  takes both halves at its call (`states.by_engine(hdfs=..., rocksdb=...)`, the shape the kinds
  replaced): a flag again, or both branches where the code runs; the halves are to be what
  differs (a value, a function, an object with the behaviour), kept in one pair beside the code;
- a format's yes-or-no answer branched on (`if not states.names_by(uid)`, `… or
  states.refusal(action)`): a format has methods that act on it (`named`, `refuse_unnamed`,
  `on_refusal`, `unless_refused`, `refuse`);
- a state file's kind compared with one engine's (`f.kind == FileKind.ZIP`, `kind in
  (FileKind.ZIP, FileKind.SNAPSHOT)`): the engine split asked of a file. The kind answers what it
  is to a load (`is_base`, `is_step`, `lists_files`), and `checkpoint.format` reads a state file as
  its kind is read (`count_records`, `stream_records`, `check_whole`). A kind passed to a lookup
  (`index.get(sid, FileKind.ZIP, …)`) names a file, and is not counted; nor are the kinds only one
  engine has (SST, WAL_LOG)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

SHIPPED = ("checkpoint", "jobs", "assets", "orchestration", "cli")
_ATTRIBUTES = {"provider", "provider_class", "format_version", "states"}
_NAMES = {"Provider", "provider", "format_version", "LISTED", "NAMED", "UNSAFE_ROW_MAPS", "ROCKSDB_INSTANCES"}
_IDS = {"unique_id", "uid"}
# Data, not branches: what a format is (its name, provider and version, passed on as Spark's conf)
# and which files its provider writes.
_DATA = {"provider", "version", "files"}


def _flags() -> set[str]:
    """The fields of every format's type (a subclass's too: a foreign format's pinned class)."""
    from checkpoint.format.states import FOREIGN, KNOWN

    return {f.name for fmt in (FOREIGN, *KNOWN.values()) for f in dataclasses.fields(fmt)} - _DATA


def _names(node: ast.AST, attributes: set[str], names: set[str]) -> bool:
    return any(
        (isinstance(sub, ast.Attribute) and sub.attr in attributes)
        or (isinstance(sub, ast.Name) and sub.id in names)
        for sub in ast.walk(node)
    )


def _is_version_of_a_format(node: ast.AST) -> bool:
    """`ckpt.states.version`, `ckpt.states_at(b).version`."""
    if not (isinstance(node, ast.Attribute) and node.attr == "version"):
        return False
    base = node.value.func if isinstance(node.value, ast.Call) else node.value
    return isinstance(base, ast.Attribute) and base.attr in ("states", "states_at")


# A kind of state file that the other engine has a counterpart of: a zip or a snapshot (the base), a
# changelog or a delta (the step).
_SPLIT_KINDS = {"ZIP", "SNAPSHOT", "CHANGELOG", "DELTA"}


def _is_split_kind(node: ast.AST) -> bool:
    """`FileKind.ZIP`, or a tuple, list or set written with one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_split_kind(e) for e in node.elts)
    return (
        isinstance(node, ast.Attribute)
        and node.attr in _SPLIT_KINDS
        and isinstance(node.value, ast.Name)
        and node.value.id == "FileKind"
    )


def _compares_a_format(node: ast.Compare) -> bool:
    sides = (node.left, *node.comparators)
    if any(_names(side, _ATTRIBUTES, _NAMES) for side in sides):
        return True
    if any(_is_split_kind(side) for side in sides):
        return True
    if any(_is_version_of_a_format(sub) for side in sides for sub in ast.walk(side)):
        return True
    tests_none = any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators)
    left = node.left
    names_an_id = (isinstance(left, ast.Name) and left.id in _IDS) or (
        isinstance(left, ast.Attribute) and left.attr in _IDS
    )
    return tests_none and names_an_id


def format_branches(root: Path) -> list[str]:
    """`path:line: code` for each place that decides by the format itself."""
    flags = _flags()
    found = []
    for package in SHIPPED:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("checkpoint/format/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.Compare) and _compares_a_format(node):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                elif isinstance(node, ast.BoolOp) and any(
                    _names(v, {"format_version"}, set()) for v in node.values
                ):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")  # `ckpt.format_version or 2`
                elif isinstance(node, ast.Attribute) and node.attr in flags and _reads_a_format(node.value):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                elif _answers_with_booleans(node) or _selects_at_the_call(node):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                else:
                    found += [f"{rel}:{t.lineno}: {ast.unparse(t)}" for t in _yes_or_no_branched(node)]
    return found


def _called(node: ast.AST) -> str | None:
    """The name a call calls (`f(…)`, `x.f(…)`), else None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _answers_with_booleans(node: ast.AST) -> bool:
    """`ByEngine(hdfs=True, rocksdb=False)`, `ByRecovery(listed=False, named=True)`."""
    if _called(node) not in ("ByEngine", "ByRecovery"):
        return False
    assert isinstance(node, ast.Call)
    answers = [k.value for k in node.keywords] + list(node.args)
    return bool(answers) and all(isinstance(a, ast.Constant) and isinstance(a.value, bool) for a in answers)


def _selects_at_the_call(node: ast.AST) -> bool:
    """`….by_engine(hdfs=…, rocksdb=…)`, `….by_recovery(listed=…, named=…)`, and the same written
    with the kinds, a pair made where its half is taken (`….engine.of(ByEngine(hdfs=…, …))`); a
    kind's type tested (`isinstance(….engine, Unread)`)."""
    if _called(node) in ("by_engine", "by_recovery"):
        return True
    if _called(node) == "of":
        assert isinstance(node, ast.Call)
        return any(_called(a) in ("ByEngine", "ByRecovery") for a in node.args)
    if _called(node) == "isinstance":
        assert isinstance(node, ast.Call)
        return any(_names(a, {"engine", "recovery"}, set()) for a in node.args[:1])
    return False


_YES_OR_NO = ("names_by", "refusal")


def _yes_or_no_branched(node: ast.AST) -> list[ast.AST]:
    """The calls of a format's yes-or-no questions that `node` branches on: its test (`if`,
    `while`, `… if … else …`, a comprehension's `if`), a `not`'s operand, an `and`/`or`'s values."""
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        tests = [node.test]
    elif isinstance(node, ast.comprehension):
        tests = list(node.ifs)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        tests = [node.operand]
    elif isinstance(node, ast.BoolOp):
        tests = list(node.values)
    elif isinstance(node, ast.Compare):  # `states.refusal(a) is not None`
        tests = [node.left, *node.comparators]
    elif isinstance(node, ast.Match):
        return [node.subject] if _names(node.subject, {"engine", "recovery"}, set()) else []
    else:
        return []
    # `if why := states.refusal(a)`: the call inside the name it is given
    tests = [t.value if isinstance(t, ast.NamedExpr) else t for t in tests]
    return [t for t in tests if _called(t) in _YES_OR_NO]


def _reads_a_format(node: ast.AST) -> bool:
    """The object a flag is read from is a state format: `….states`, `….states_at(b)`, `states`."""
    if isinstance(node, ast.Call):
        node = node.func
    return (isinstance(node, ast.Attribute) and node.attr in ("states", "states_at")) or (
        isinstance(node, ast.Name) and node.id in ("states", "fmt", "state_format")
    )
