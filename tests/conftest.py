"""Session fixtures: the cached corpus of real checkpoints and one SparkSession for oracle checks."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import pytest

from checkpoint.model.checkpoint import Checkpoint, load_checkpoint
from testbed import class_archive, jvm
from testbed.cache import MANIFEST, cache_home
from testbed.copying import copy_checkpoint
from testbed.corpus import checkpoints, ensure_corpus
from testbed.python_workers import worker_python
from tests.support.disk import GIB, RAM_TEMP_GIB, ram_temp

# The tests' temporary files in memory where the machine has room (`tests.support.disk.ram_temp`),
# set before anything asks where they go: pytest's, the product's, and every child's through the
# environment (the JVMs' as `java.io.tmpdir`, below). Workers find `TMPDIR` set and keep it.
# Each session gets a folder of its own there, removed when the controller exits: what a JVM killed
# mid-run leaves (Spark's `spark-*` and `artifacts-*` folders, its shutdown hook never run) would
# otherwise hold the machine's memory from one run to the next (722 MB after a day of runs).
if (_RAM_TEMP := ram_temp(RAM_TEMP_GIB * GIB)) is not None:
    _RUN_TEMP = tempfile.mkdtemp(prefix="run-", dir=_RAM_TEMP)
    atexit.register(shutil.rmtree, _RUN_TEMP, True)
    os.environ["TMPDIR"] = _RUN_TEMP
    tempfile.tempdir = None

# The suite's JVMs (this session's, and every child's through the environment), tuned for minutes
# of little data and many small files (`testbed.jvm`, docs/testing.md), mapping Spark's classes from
# the cache's archive once the session's start has written it (`testbed.class_archive`).
JVM_OPTIONS = jvm.options(version("pyspark"), class_archive.path_for(cache_home()), tempfile.gettempdir())
os.environ.setdefault("SPARK_SUBMIT_OPTS", JVM_OPTIONS)
# Their Python workers import PySpark from site-packages, not from Spark's zips, compiled again at
# every start (`testbed.python_workers`).
if (_WORKERS := worker_python(Path(sys.executable), cache_home() / "python-workers")) is not None:
    os.environ.setdefault("PYSPARK_PYTHON", str(_WORKERS))

# Fixtures defined beside the helpers they share with more than one test folder.
pytest_plugins = ("tests.support.memory", "tests.support.hostile", "tests.support.histories")


@pytest.fixture(scope="session")
def corpus_root() -> Path:
    # Generation failures raise here and fail every test that needs the corpus, loudly.
    return ensure_corpus()


@pytest.fixture(scope="session")
def corpus(corpus_root: Path) -> dict[str, Path]:
    return checkpoints(corpus_root)


@pytest.fixture(scope="session")
def rescue() -> Path:
    """The scenario folder of the query that died on the lineage header cap (`testbed.corpus`)."""
    from testbed.generators import ensure_rescue_corpus

    return ensure_rescue_corpus()


@pytest.fixture(scope="session")
def defaults_root() -> Path:
    """The corpus of the checkpoints Spark writes with its defaults (`testbed.defaults`)."""
    from testbed.defaults import ensure_defaults_corpus

    return ensure_defaults_corpus()


@pytest.fixture(scope="session")
def defaults(defaults_root: Path) -> dict[str, Path]:
    """The checkpoints Spark writes with its defaults: HDFS-backed, RocksDB V1."""
    return checkpoints(defaults_root)


@pytest.fixture(scope="session")
def manifest(corpus_root: Path) -> dict:
    return json.loads((corpus_root / MANIFEST).read_text())


@pytest.fixture(scope="session")
def loaded(corpus: dict[str, Path]) -> dict[str, Checkpoint]:
    return {name: load_checkpoint(str(path)) for name, path in corpus.items()}


@pytest.fixture(scope="session")
def spark():
    from jobs.spark_session import local_session
    from testbed.s3a import session_conf

    # With Hadoop's s3a connector: Spark reads and writes the S3 tests' checkpoints itself.
    session = local_session(master="local[2]", app_name="ckpt-tests", extra_conf=session_conf())
    yield session
    session.stop()


@pytest.fixture(scope="session")
def ports(spark):
    """The session's Spark as the ports `jobs/` gives the core's actions (`SparkPorts`)."""
    from tests.support.spark import SparkPorts

    return SparkPorts(spark)


def _active_spark_context():
    pyspark = sys.modules.get("pyspark")
    return pyspark and pyspark.SparkContext._active_spark_context


@pytest.fixture(autouse=True)
def spark_through_its_fixture(request):
    """The worker's one SparkContext is the `spark` fixture's, with the s3a jars: a test that starts
    Spark through a resource first would leave every later test of its worker a context without
    them, and the S3 tests would fail far from the cause, on whichever machine orders files so."""
    before = _active_spark_context()
    yield
    if before is None and "spark" not in request.fixturenames and (started := _active_spark_context()):
        started.stop()  # the next test that needs Spark starts the right one
        pytest.fail("this test started Spark without the `spark` fixture: request it, so that the "
                    "worker's session is the one with the s3a jars")  # fmt: skip


@pytest.fixture(autouse=True)
def no_dagster_instance_left_current(request):
    """Each test starts with no current Dagster defs-state storage, as a fresh process does.
    Dagster keeps the storage of the instance last entered in a context variable, and a test that
    resolves definitions outside an instance (`defs.resolve_job_def`) reads it: when an earlier
    test of the same worker left one behind, its instance disposed, that read fails ("unable to
    open database file", "undefined DagsterInstance weakref") in whichever test the worker runs
    next. The test that leaves one behind is named in a warning, so that it can be found."""
    from dagster._core.storage.defs_state.base import DefsStateStorage, set_defs_state_storage

    with set_defs_state_storage(None):
        yield
        if DefsStateStorage.get() is not None:
            import warnings

            warnings.warn(f"{request.node.nodeid} left a Dagster defs-state storage current", stacklevel=1)


@pytest.fixture
def no_gathering(monkeypatch):
    """The commit sensor with its caps, but compactions asked for at the tick that finds them
    rather than gathered for a window of the wall clock."""
    import dataclasses

    from orchestration import sensors

    caps = dataclasses.replace(sensors.SENSOR_CAPS, compaction_gather_seconds=0)
    monkeypatch.setattr(sensors, "SENSOR_CAPS", caps)
    return caps


@pytest.fixture
def copy_of(corpus: dict[str, Path], tmp_path: Path):
    """A private copy of a corpus checkpoint, for tests that damage it."""

    def copy(name: str) -> Path:
        dst = tmp_path / name
        copy_checkpoint(corpus[name], dst)
        return dst

    return copy


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3 server (SeaweedFS) on loopback behind a counting, fault-injecting proxy.

    Credentials come from the environment (set here when absent, as CI has none); one bucket per
    test session. Yields (server, proxy, bucket).
    """
    import uuid

    from testbed.s3server import s3_services

    bucket = f"ckpt-tests-{uuid.uuid4().hex[:8]}"
    with s3_services(tmp_path_factory.mktemp("seaweedfs"), bucket) as (server, proxy):
        # A code path that forgets its storage options must reach this server, never the internet.
        before = os.environ.get("AWS_ENDPOINT_URL")
        os.environ["AWS_ENDPOINT_URL"] = server.endpoint
        try:
            yield server, proxy, bucket
        finally:
            if before is None:
                os.environ.pop("AWS_ENDPOINT_URL", None)
            else:
                os.environ["AWS_ENDPOINT_URL"] = before


@contextmanager
def _environment(**values: str):
    """Variables set for a session's tests and the commands they start, then put back."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def azure(tmp_path_factory):
    """A real Azure Blob Storage server (Azurite) on loopback behind the proxy that counts requests,
    one container per test session, reached by adlfs through AZURE_STORAGE_CONNECTION_STRING (the
    CLI's children too) via the proxy. Yields (server, proxy, container)."""
    import uuid

    from testbed.azurite import azurite_services

    container = f"ckpt-tests-{uuid.uuid4().hex[:8]}"
    with azurite_services(tmp_path_factory.mktemp("azurite"), container) as (server, proxy):
        with _environment(AZURE_STORAGE_CONNECTION_STRING=server.connection_string(proxy.endpoint)):
            yield server, proxy, container


@pytest.fixture(scope="session")
def gcs(tmp_path_factory):
    """A GCS emulator on loopback behind the proxy that counts requests and keeps GCS's create
    precondition (`testbed.gcsserver`), one bucket per test session, reached by gcsfs through
    STORAGE_EMULATOR_HOST. Yields (server, proxy, bucket)."""
    import uuid

    from testbed.gcsserver import gcs_services

    bucket = f"ckpt-tests-{uuid.uuid4().hex[:8]}"
    with gcs_services(tmp_path_factory.mktemp("gcs"), bucket) as (server, proxy):
        with _environment(STORAGE_EMULATOR_HOST=proxy.endpoint, GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false"):
            yield server, proxy, bucket


@pytest.fixture(params=["azure", "gcs"])
def cloud_store(request) -> dict:
    """One store: its URL's protocol, how Spark's connector names a place there (`container/key` or
    `bucket/key` to the URL written into a checkpoint's schema paths), the client a test sets up
    with (on GCS through the proxy, so its uploads keep the precondition too), where a test puts
    its objects (a folder of its own in the session's container or bucket), and the proxy that
    counts the requests of the product's clients."""
    import uuid

    from checkpoint.storage.azure import AzureBackend
    from checkpoint.storage.gcs import GCSBackend
    from tests.support.clouds import abfs_url

    if request.param == "azure":
        server, proxy, container = request.getfixturevalue("azure")
        return {"name": "azure", "protocol": "az", "spark": abfs_url, "fs": server.filesystem(),
                "base": f"{container}/{uuid.uuid4().hex[:8]}", "backend": AzureBackend,
                "proxy": proxy}  # fmt: skip
    server, proxy, bucket = request.getfixturevalue("gcs")
    return {"name": "gcs", "protocol": "gs", "spark": lambda where: f"gs://{where}",
            "fs": server.filesystem(proxy.endpoint), "base": f"{bucket}/{uuid.uuid4().hex[:8]}",
            "backend": GCSBackend, "proxy": proxy}  # fmt: skip


@pytest.fixture
def s3_copy_of(s3, corpus: dict[str, Path], request):
    """Uploads a private copy of a corpus checkpoint (the main corpus', or one of Spark's default
    formats); returns its s3:// URL (reached via the proxy). The default formats' corpus is asked
    for only by a test that uploads one of them: on a cold cache it is ready last."""
    import uuid

    server, proxy, bucket = s3
    fs = server.filesystem()

    def upload(name: str, prefix: str | None = None, hadoop_checksums: bool = False) -> str:
        from testbed.copying import upload_checkpoint

        local = corpus[name] if name in corpus else request.getfixturevalue("defaults")[name]
        dest = f"{bucket}/{prefix or uuid.uuid4().hex[:8]}/{name}"
        return upload_checkpoint(fs, local, dest, hadoop_checksums=hadoop_checksums)

    proxy.reset()  # faults armed by one test never leak into the next
    yield upload
    proxy.reset()


@pytest.fixture(scope="session")
def operators() -> Path:
    """The operator corpus (`testbed.operators`: transformWithState's queries, among them the ones
    whose TTLs expired), generated once on a cold cache."""
    from testbed.operators import ensure_operator_corpus

    return ensure_operator_corpus()


@pytest.fixture(scope="session")
def written_by():
    """`written_by(version)`: the folder of `testbed.generations.SCENARIOS` as PySpark `version`
    wrote them (format V2), generated once in a cached virtualenv of that version; with
    `defaults=True`, `DEFAULT_SCENARIOS` (Spark's default formats)."""
    from testbed.generations import ensure_written_by

    return lambda version, defaults=False: ensure_written_by(cache_home(), version, defaults=defaults)


# The tiers (docs/testing.md), told from what a test uses, transitively: a Spark session or
# checkpoints other Sparks wrote; the corpus real queries write (Spark generates it on a cold
# cache); the S3 server; real queries restarted (`slow`); long proofs at scale or under contention
# (`stress`: no Java, but a minute each). A test that uses none is a unit test: it
# runs without Java, from synthetic checkpoints and the lz4 writer (`make test-unit`).
_CORPORA = {"corpus_root", "corpus", "defaults", "manifest", "loaded", "copy_of", "rescue", "operators"}
# `cloud_store` and `histories` reach their server by name (`getfixturevalue`), which a test's
# fixture closure does not show: they are named here.
_TIERS = (("e2e", "slow"), ("stress", "stress"), ("s3", {"s3"}),
          ("cloud", {"azure", "gcs", "cloud_store", "histories"}), ("spark", {"spark", "written_by"}),
          ("corpus", _CORPORA))  # fmt: skip


# The files that take minutes, longest first. Under pytest-xdist (`--dist loadfile`) this only breaks
# ties: xdist hands files out by their number of tests (its `loadscopereorder`, on by default), and
# with `--no-loadscope-reorder` these files all started together and ran twice as long (a warm run
# took 27.9 min instead of 19-23.5: docs/testing.md). Only the order changes; a file missing here
# runs after these.
_LONGEST_FIRST = ("orchestration/test_orchestration_e2e", "checkpoint/analysis/test_generations",
                  "test_project", "checkpoint/migrate/test_migrate", "checkpoint/test_grid",
                  "checkpoint/repartition/test_repartition", "checkpoint/cleanup/test_gc_live",
                  "checkpoint/compaction/test_compaction", "checkpoint/compaction/test_default_formats",
                  "checkpoint/fork/test_fork", "assets/test_dagster_actions",
                  "cli/test_readiness",
                  "checkpoint/cleanup/test_gc_memory", "orchestration/test_commit_sensor",
                  "checkpoint/safety/test_lease", "checkpoint/test_history_on_s3",
                  "checkpoint/retire/test_on_s3", "checkpoint/cleanup/test_on_s3",
                  "checkpoint/storage/test_clouds", "checkpoint/test_history_on_stores")  # fmt: skip


# The corpora a cold cache generates, by the fixture that needs each (used directly or through
# another): started side by side in the background when the session starts (`testbed.prewarm`).
_PREWARMED = {"corpus_root": "corpus", "defaults": "defaults", "rescue": "rescue",
              "written_by": "generations", "spark": "classes"}  # fmt: skip
_BACKGROUND = pytest.StashKey["subprocess.Popen | None"]()


def pytest_collection_finish(session) -> None:
    # Once per session: by the first worker under pytest-xdist (each collects every test), else here.
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return
    from testbed.prewarm import start

    used = {fixture for item in session.items for fixture in item.fixturenames}
    wanted = sorted(name for fixture, name in _PREWARMED.items() if fixture in used)
    session.config.stash[_BACKGROUND] = start(wanted, cache_home() / "prewarm.log")


def pytest_unconfigure(config) -> None:
    from testbed.prewarm import stop

    stop(config.stash.get(_BACKGROUND, None))


# Room the suite takes on disk (docs/testing.md): its temporary files at their peak (a passing
# test's are removed as it ends: pyproject's tmp_path_retention_policy; 0.37 GB sampled, and the
# 10,000-checkpoint fleet, 0.8 GiB, is cached), and a cold cache filled (5.7 GiB: the corpora, the
# other PySparks' virtualenvs and pip's downloads for them, the fleet, Spark's class archive; and
# since the other PySparks got theirs, three archives more, 0.45 GiB).
TEMP_PEAK_GIB = 1
COLD_CACHE_GIB = 7


_STARTED = pytest.StashKey[float]()


def pytest_sessionstart(session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller checks once, before any worker starts
        return
    import tempfile
    import time

    session.config.stash[_STARTED] = time.time()

    from testbed import fleet
    from testbed.prewarm import missing
    from tests.support.disk import shortfall

    home = cache_home()
    corpora = sorted(set(_PREWARMED.values()) - {"classes"})  # a new venv's archive alone is no cold cache
    cold = bool(missing(corpora)) or not (fleet.cache_dir() / MANIFEST).exists()
    unit_only = session.config.getoption("markexpr", "").strip() == "unit"
    needs = [("the tests' temporary files", Path(tempfile.gettempdir()), TEMP_PEAK_GIB * GIB)]
    if cold and not unit_only:
        needs.append(("a cold cache's corpora and PySparks", home, COLD_CACHE_GIB * GIB))
    if lines := shortfall(needs):
        pytest.exit("not enough room on disk, so no test was run: " + "; ".join(lines), returncode=4)


def pytest_sessionfinish(session) -> None:
    """The cached corpora are every test's input: a test that leased or audited one (a fork or a
    migration of it, not of a copy) changed what the others read, and fails the session here."""
    started = session.config.stash.get(_STARTED, None)
    if os.environ.get("PYTEST_XDIST_WORKER") or started is None:
        return
    from testbed.cache import corpus_base

    homes = {cache_home(), corpus_base().parent}  # CKPT_CORPUS_CACHE moves the corpora
    trails = {f for home in homes for f in _trails_in(home)}
    written = sorted(str(f) for f in trails if f.stat().st_mtime >= started - 1)
    if written:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nA test wrote into the cached corpora (use a copy): {written[:5]}", file=sys.stderr)


def _trails_in(home: Path) -> list[Path]:
    """The files of every audit trail a checkpoint of the corpora holds (the venvs, the fleet and
    the benchmarks' inputs, which no test forks, left out: they are most of the cache)."""
    found = []
    for corpus in home.iterdir() if home.is_dir() else ():
        if corpus.is_dir() and not corpus.name.startswith(("pyspark-", "fleet-", "jars", "bench-")):
            for folder, _, files in os.walk(corpus):
                if "/_ckpt_audit/" in folder + "/":
                    found += [Path(folder) / f for f in files]
    return found


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    tests = Path(__file__).parent
    # By the file's path under tests/, without `.py`: stable, order within a file kept.
    items.sort(key=lambda item: rank.get(item.path.relative_to(tests).with_suffix("").as_posix(), len(rank)))
    for item in items:
        used = set(item.fixturenames)
        marked = {m.name for m in item.iter_markers()}
        tiers = [name for name, by in _TIERS if (by in marked if isinstance(by, str) else used & by)]
        for tier in tiers or ["unit"]:
            item.add_marker(getattr(pytest.mark, tier))
