"""A throwaway PostgreSQL server on loopback, from Debian's `postgresql` package (`make postgres`
installs it where it is missing), for Dagster's Postgres storage in the end-to-end test and the
deployment bench."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

USER = "dagster"


def _binaries() -> Path:
    """The folder of `initdb` and `pg_ctl`: on PATH, or Debian's versioned folder (not on PATH)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not versions:
        raise RuntimeError("PostgreSQL is not installed: `make postgres` installs Debian's package")
    return Path(versions[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shared_temp() -> Path:
    """The nearest folder holding the temporary folder that every user may write in, sticky as
    /tmp and /dev/shm are; else the temporary folder itself."""
    here = Path(tempfile.gettempdir())
    for folder in (here, *here.parents):
        if folder.stat().st_mode & 0o1777 == 0o1777:
            return folder
    return here


@contextmanager
def postgres_server() -> Iterator[str]:
    """A new cluster serving on a free loopback port with trust authentication (no password to
    leak into a config); yields its URL for one database, `dagster`. Stopped and removed on exit.
    PostgreSQL refuses to run as root: as root, the cluster belongs to the package's `postgres`
    user, in a folder of its own under a temporary folder shared by every user (a test's own folder,
    and the suite's in memory, are private to root)."""
    bin_dir = _binaries()
    shared = _shared_temp() if os.geteuid() == 0 else None
    folder = Path(tempfile.mkdtemp(prefix="ckpt-postgres-", dir=shared))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    run_as: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        for path in (folder, sockets):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*run_as, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:1])} failed: {done.stderr[-2000:]}")

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(folder / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )
        try:
            run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, "dagster")
            # The driver named: SQLAlchemy 2.1 takes `postgresql://` to mean psycopg 3, which
            # dagster-postgres does not install (it brings psycopg2).
            yield f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/dagster"
        finally:
            subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                           capture_output=True, timeout=120)  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
