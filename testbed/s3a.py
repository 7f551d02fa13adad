"""Hadoop's s3a connector for the local test and bench sessions, from a registry this machine reaches.

PySpark ships hadoop-client 3.5.0 without hadoop-aws, and Maven is out of reach here. PyPI's
sagemaker-pyspark 1.4.5 bundles hadoop-aws 3.3.1 and the AWS SDK bundle 1.11.901; its sdist is
fetched once (sha256 checked against PyPI's own record), and the two jars are kept in the cache.

That connector is older than the client it runs beside, which reads a few s3a durations with
units ("60s") where 3.3.1 expects plain numbers: COMPAT_CONF gives them as numbers, which 3.5.0
reads as the same durations. A deployment puts its own Spark's hadoop-aws on the classpath instead.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import urllib.request
from pathlib import Path

from testbed.cache import cache_home, cache_lock

_PACKAGE, _VERSION = "sagemaker-pyspark", "1.4.5"
_JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")

COMPAT_CONF = {
    "spark.hadoop.fs.s3a.connection.establish.timeout": "30000",  # ms
    "spark.hadoop.fs.s3a.connection.timeout": "200000",  # ms
    "spark.hadoop.fs.s3a.connection.ttl": "300000",  # ms
    "spark.hadoop.fs.s3a.threads.keepalivetime": "60",  # s
    "spark.hadoop.fs.s3a.multipart.purge.age": "86400",  # s
}


def s3a_jars() -> list[Path]:
    """The connector's jars, fetched into the cache on first use."""
    folder = cache_home() / "jars" / f"{_PACKAGE}-{_VERSION}"
    jars = [folder / name for name in _JARS]
    if all(j.exists() for j in jars):
        return jars
    with cache_lock(folder):
        if not all(j.exists() for j in jars):  # another process fetched them while this one waited
            _fetch(folder, jars)
    return jars


def _fetch(folder: Path, jars: list[Path]) -> None:
    with urllib.request.urlopen(f"https://pypi.org/pypi/{_PACKAGE}/json", timeout=60) as r:
        sdist = next(u for u in json.load(r)["releases"][_VERSION] if u["packagetype"] == "sdist")
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{sdist['filename']}.part"
    digest = hashlib.sha256()
    with urllib.request.urlopen(sdist["url"], timeout=600) as r, open(partial, "wb") as out:
        while block := r.read(1 << 20):
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != sdist["digests"]["sha256"]:
        partial.unlink()
        raise RuntimeError(f"{sdist['url']}: sha256 differs from PyPI's record")
    with tarfile.open(partial) as tar:
        for member in tar.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if name in _JARS:
                source = tar.extractfile(member)
                assert source is not None
                temp = folder / f"{name}.part"
                with open(temp, "wb") as out:
                    shutil.copyfileobj(source, out)  # the SDK bundle is 190 MB: never held whole
                temp.rename(folder / name)
    partial.unlink()
    missing = [j.name for j in jars if not j.exists()]
    if missing:
        raise RuntimeError(f"{sdist['filename']} does not hold {missing}")


def session_conf() -> dict[str, str]:
    """What a local session needs for s3a: the jars and the durations as numbers."""
    return {"spark.jars": ",".join(str(j) for j in s3a_jars()), **COMPAT_CONF}
