"""What the tests on S3 share: the session's server reached directly or through the counting
proxy, the CLI run against it, and a changed checkpoint brought home and restarted.

The server (SeaweedFS on loopback), its proxy and the session's bucket are the `s3` fixture's;
every request sent through the proxy is counted (request economy) and can be made to fail as S3
really fails."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import s3fs

from checkpoint.safety import AuditTrail
from checkpoint.storage import Storage
from testbed.copying import copy_checkpoint
from tests.support.cli import ckpt
from tests.support.planning import LATER, candidates_of, plan_of


def cli(proxy, *args: str) -> subprocess.CompletedProcess:
    """`ckpt` with only the standard environment: credentials and region come from the session
    fixture's AWS_*, the endpoint is the proxy's."""
    return ckpt(*args, timeout=300, env={"AWS_ENDPOINT_URL": proxy.endpoint})


def direct(s3) -> s3fs.S3FileSystem:
    """The server itself, past the proxy: what a test sets up or looks at is not counted."""
    return s3[0].filesystem()


def via_proxy(s3) -> dict[str, Any]:
    server, proxy, _ = s3
    return server.storage_options(proxy.endpoint)


def with_attempts(s3, attempts: int) -> dict[str, Any]:
    """Through the proxy, botocore allowed `attempts` requests a call."""
    return {
        **via_proxy(s3),
        "config_kwargs": {"retries": {"mode": "adaptive", "total_max_attempts": attempts}},
    }


def root_options(s3) -> dict[str, Any]:
    """A Dagster root's options: where the server is, never who we are. The credentials come from
    the environment (botocore's chain), as a deployment's must: a root refuses them."""
    return {k: v for k, v in via_proxy(s3).items() if k not in ("key", "secret")}


def keys(s3, url: str) -> list[str]:
    """Every object under `url`, relative to it."""
    root = url[len("s3://") :]
    return [k[len(root) + 1 :] for k in direct(s3).find(root)]


def same(remote: dict, url: str, local: dict, path: str) -> bool:
    """Whether two `--json` documents say the same of a checkpoint on S3 and of its local copy."""
    # Findings name fsspec paths, which drop the scheme; the documents name the checkpoint's URL.
    text = json.dumps(remote, sort_keys=True).replace(url, "<ckpt>").replace(url[len("s3://") :], "<ckpt>")
    return text == json.dumps(local, sort_keys=True).replace(path, "<ckpt>")


def planned_on(url: str, options: dict, audit: AuditTrail):
    """A cleanup plan of a just-uploaded checkpoint, and its candidates."""
    plan = plan_of(Storage(url, options), audit, now=time.time() + LATER)
    assert plan.files >= 4
    return plan, candidates_of(plan, audit)


def restarts_like_untouched(s3, spark, corpus, corpus_root, url: str, tmp_path: Path) -> None:
    """Copied from S3 to local disk, the changed checkpoint restarts the query like an untouched copy."""
    from testbed.corpus import scenario_named
    from tests.support.state import restart_like_untouched

    name = url.rsplit("/", 1)[-1]
    local, untouched = tmp_path / "from-s3" / name, tmp_path / "untouched" / name
    direct(s3).get(url[len("s3://") :] + "/", str(local), recursive=True)
    copy_checkpoint(corpus[name], untouched)
    extra = tmp_path / "more-input"
    restart_like_untouched(spark, scenario_named(name), corpus_root / name, local, untouched, extra)
