"""The interpreter the suite's Spark starts its Python workers with: a virtualenv's own, run
without that PySpark's zips on its path.

Spark puts its `pyspark.zip` and py4j's zip first on every Python worker's path
(`PythonUtils.sparkPythonPath`), also where PySpark was installed by pip and the same modules sit
in site-packages. Python keeps no bytecode for a zip's modules, so every worker daemon and every
transformWithState driver worker compiled PySpark from source: 0.6 CPU-seconds each start, against
0.12 from site-packages, and a suite run starts about 80. The wrapper drops the zips of the
PySpark installed beside the interpreter (its `python/lib/*.zip`: its own and py4j's) from
`PYTHONPATH` and runs the interpreter, which then imports the same release from its
site-packages. Every other entry stays, in order. The suite sets it for its Spark
(`tests/conftest.py`) and for the children it runs under other PySparks
(`testbed.generations.child_env`); deployments keep Spark's own way.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

# Characters a path may hold to be written into the script between single quotes.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@ ")

_SCRIPT = """#!/bin/sh
# Written by testbed.python_workers: {python} without its PySpark's zips on PYTHONPATH.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case $entry in
    {patterns}) ;;
    *) kept=${{kept:+$kept:}}$entry ;;
  esac
done
unset IFS
PYTHONPATH=$kept exec '{python}' "$@"
"""


def worker_python(python: Path, folder: Path) -> Path | None:
    """A script in `folder` that runs `python` (a virtualenv's) without the zips of the PySpark in
    its site-packages on its path; None, and Spark's own way kept, where there is no such PySpark,
    it ships no zip, or a path cannot be written into a script as it is."""
    pyspark = installed_pyspark(python)
    if pyspark is None:
        return None
    libs = {str(pyspark / "python" / "lib"), os.path.realpath(pyspark / "python" / "lib")}
    if not (pyspark / "python" / "lib" / "pyspark.zip").is_file():
        return None
    if any(set(text) - _PLAIN for text in (*libs, str(python))):
        return None
    patterns = "|".join(f"'{lib}/'*.zip" for lib in sorted(libs))
    script = _SCRIPT.format(python=python, patterns=patterns)
    target = folder / f"python-{hashlib.sha256(script.encode()).hexdigest()[:16]}"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        partial.write_text(script)
        partial.chmod(0o755)
        os.replace(partial, target)  # workers writing the same script at once each write it whole
    return target


def installed_pyspark(python: Path) -> Path | None:
    """The PySpark package in the site-packages of `python`'s virtualenv, if it has exactly one."""
    found = sorted(python.parent.parent.glob("lib/python*/site-packages/pyspark"))
    return found[0] if len(found) == 1 else None


def pyspark_version(pyspark: Path) -> str | None:
    """The release of an installed PySpark package, as pip recorded it beside the package."""
    found = sorted(pyspark.parent.glob("pyspark-*.dist-info"))
    return found[0].name.removeprefix("pyspark-").removesuffix(".dist-info") if len(found) == 1 else None
