"""One spelling per location: URL normalisation, protocol aliases, and options from the environment."""

from __future__ import annotations

import os
import re
from typing import Any

from fsspec.core import split_protocol

from checkpoint.errors import StorageError
from checkpoint.policy import POLICY

# Option names that carry a credential, at any depth of the options: s3fs' key/secret/token,
# botocore's aws_* and SSECustomerKey, adlfs' account_key/sas_token/connection_string, gcsfs'
# token, passwords and passphrases, API keys, and headers that authenticate (Authorization,
# Cookie, security tokens).
_CREDENTIAL = re.compile(
    r"(^key$|secret|token|password|passwd|passphrase|credential|connection.?string|account.?key|access.?key"
    r"|private.?key|customer.?key|api.?key|^sas|authorization|cookie)",
    re.IGNORECASE,
)
# `scheme://user:password@host/...`: user info before the first slash of the authority.
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/@]*@)")
# Hadoop's spelling of an Azure location, which Spark's ABFS (and legacy WASB) connector writes
# into a checkpoint's own files: the container before the `@`, then the account's endpoint. The
# names are Azure's (a container of 3-63 lowercase letters, digits and hyphens; an account of 3-24
# letters and digits), so a user and password (`user:secret@`) never pass for one.
_AZURE_QUALIFIED = re.compile(
    r"^(?:abfss?|wasbs?|az)://(?P<container>[a-z0-9][a-z0-9-]{1,61}[a-z0-9])@"
    r"(?P<account>[a-z0-9]{3,24})\.(?:dfs|blob)\.core\.windows\.net(?=/|$)",
    re.IGNORECASE,
)


def _userinfo(url: str) -> bool:
    url = url.strip()
    return bool(_USERINFO.match(url)) and not _AZURE_QUALIFIED.match(url)


def azure_account(url: str) -> str | None:
    """The storage account an account-qualified Azure URL names, else None."""
    found = _AZURE_QUALIFIED.match(url.strip())
    return found["account"].lower() if found else None


def redact(url: str) -> str:
    """The URL with any user info hidden: what a message may show of it."""
    if not _userinfo(url):
        return url.strip()
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", url.strip())


def refuse_userinfo(url: str, where: str = "a URL") -> None:
    """A URL that carries a user or password prints it in every message, log line and finding
    that names a path: refused, and never echoed."""
    if _userinfo(url):
        raise StorageError(
            f"{where} carries a user or password: give credentials through the environment "
            "(botocore's chain, the file system's own variables), never in a URL (before an `@`, "
            "only an Azure container before `<account>.dfs|blob.core.windows.net` is taken)",
            redact(url),
        )


def credentials_in(options: Any, path: str = "") -> list[str]:
    """Where a credential sits in options of any shape (dicts and lists, at any depth): a key
    named like one, or a URL with user info. The places are named, the values never."""
    found: list[str] = []
    if isinstance(options, dict):
        for name, value in options.items():
            here = f"{path}.{name}" if path else str(name)
            if _CREDENTIAL.search(str(name)):
                found.append(here)
            else:
                found += credentials_in(value, here)
    elif isinstance(options, (list, tuple)):
        for i, value in enumerate(options):
            found += credentials_in(value, f"{path}[{i}]")
    elif isinstance(options, str) and _userinfo(options):
        found.append(path or "a URL")
    return found


def normalize_url(url: str) -> str:
    """The one spelling of a URL, given once at the door (Storage) and used for every identity
    derived from it: lease, audit folder, fork marker, partition key.

    Local: an absolute path with `.`, `..` and doubled slashes resolved (`/x/q`, `file:///x/q`,
    `/x//q/` and a relative `q` from `/x` are one path); symlinks are kept, as a user named them.
    Object stores: `<protocol>://bucket/key` with doubled and trailing slashes removed, as Hadoop's
    Path (and so Spark) spells the keys it writes; a protocol's aliases are one protocol (`s3a://`
    and `s3n://` are `s3://`, `gcs://` is `gs://`, `abfs[s]://` and `wasb[s]://` are `az://`), and
    `file://localhost/x` is `/x` (RFC 8089). Hadoop's account-qualified Azure URL
    (`abfss://container@account.dfs.core.windows.net/x`) is `az://container/x`: the account is
    the credentials' (`azure_account` reads it, and Storage checks that the two agree), as an S3
    endpoint is.
    """
    url = url.strip()
    if (host := re.match("(?i)file://([^/?#]+)", url)) and host[1].lower() != "localhost":
        # Another machine's disk (RFC 8089): fsspec would read `otherhost/x` below the working folder.
        refuse_userinfo(url, "the location")
        raise StorageError(
            f"a file:// URL that names the host {host[1]!r}: a local disk is /x, file:///x or "
            "file://localhost/x, and another machine's is not reached from here",
            f"file://{host[1]}/...",
        )
    if qualified := _AZURE_QUALIFIED.match(url):
        url = f"az://{qualified['container'].lower()}{url[qualified.end() :]}"
    if url.startswith("file:") and not url.startswith("file://"):
        url = "file://" + url[len("file:") :]  # Hadoop's spelling of a local path: file:/x/q
    if url.lower().startswith("file://localhost/"):
        url = url[len("file://localhost") :]
    protocol, path = split_protocol(url)
    protocol = (protocol or "file").lower()
    if protocol in ("file", "local"):
        path = os.path.abspath(os.path.expanduser(path))
        return re.sub("/{2,}", "/", path)  # abspath keeps a leading "//" (POSIX allows it)
    refuse_userinfo(url, "the location")
    if "?" in path or "#" in path:
        # A query is where a SAS token or a signature rides (`?sv=...&sig=...`): never a path's.
        raise StorageError(
            "the location carries a query: give credentials (a SAS token, a signature) through the "
            "environment, never in a URL",
            f"{protocol}://{re.split('[?#]', path, maxsplit=1)[0]}?***",
        )
    protocol = _PROTOCOL_ALIASES.get(protocol, protocol)
    path = re.sub("/{2,}", "/", path)
    return f"{protocol}://{path.rstrip('/') or path}"


_PROTOCOL_ALIASES = {
    "s3a": "s3", "s3n": "s3", "gcs": "gs", "abfs": "az", "abfss": "az", "wasb": "az", "wasbs": "az"
}  # fmt: skip


def scheme_of(url: str) -> str:
    """The protocol a URL names ("file" for a plain path), without opening anything."""
    return split_protocol(url)[0] or "file"


def options_from_env(
    url: str, storage_options: dict[str, Any] | None, account: str | None = None
) -> dict[str, Any]:
    """Explicit options win; for s3:// the standard AWS_ENDPOINT_URL, AWS_REGION and
    AWS_MAX_ATTEMPTS fill the gaps; on Azure the `account` an account-qualified URL named.

    Keys and secrets are left to botocore's own credential chain (AWS_ACCESS_KEY_ID, profiles,
    instance roles), so they never pass through, or get logged by, this code.
    """
    options = dict(storage_options or {})
    if account is not None:
        given = options.get("account_name")
        if given and str(given).lower() != account:
            raise StorageError(f"the URL names the storage account {account}, its options {given}", url)
        options["account_name"] = account
    if not url.startswith(("s3://", "s3a://")):
        return options
    # One retry policy: botocore's adaptive mode (back-off with jitter, and a client-side rate
    # limit once S3 throttles). s3fs's own retry loop is switched off in Storage, and callers add
    # none of their own around a request, so a throttled request is never retried n x m times.
    config = dict(options.get("config_kwargs") or {})
    # botocore's `max_attempts` counts retries; `total_max_attempts` counts requests, as the
    # standard AWS_MAX_ATTEMPTS does, which sets it when no option does.
    raw = os.environ.get("AWS_MAX_ATTEMPTS")
    attempts = POLICY.s3_max_attempts
    if raw:
        if not raw.strip().isdigit() or int(raw) < 1:
            raise StorageError(f"AWS_MAX_ATTEMPTS={raw!r}: not a number of requests (1 or more)", url)
        attempts = int(raw)
    config.setdefault("retries", {"mode": "adaptive", "total_max_attempts": attempts})
    options["config_kwargs"] = config
    client_kwargs = dict(options.get("client_kwargs") or {})
    for env, name in (("AWS_ENDPOINT_URL", "endpoint_url"), ("AWS_REGION", "region_name")):
        if os.environ.get(env) and name not in client_kwargs and name not in options:
            refuse_userinfo(os.environ[env], env)
            client_kwargs[name] = os.environ[env]
    if client_kwargs:
        options["client_kwargs"] = client_kwargs
    return options
