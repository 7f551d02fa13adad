"""One dynamic partition per checkpoint, keyed `<root name>:<path under the root>`.

The key is readable in the UI and reversible without a lookup table. Characters Dagster reserves in
partition keys (`,` `[` `]` `|` and ranges `...`) are percent-encoded.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

import dagster as dg

CHECKPOINTS = "checkpoints"  # the name users' instances hold their partition keys under
checkpoint_partitions = dg.DynamicPartitionsDefinition(name=CHECKPOINTS)

_SAFE = "/-_~@=+:;!$'()*&"  # everything else (including % , [ ] | and space) is encoded


def partition_key(root_name: str, rel: str) -> str:
    # A root that is itself a checkpoint gets "." for its path; "." never occurs as a relative path.
    key = f"{root_name}:{quote(rel, safe=_SAFE + '.') if rel else '.'}"
    return key.replace("...", "%2E%2E%2E")


def root_of(key: str) -> str | None:
    """The root a partition key names; None for a key that is not one of ours (added by hand)."""
    try:
        return parse_partition_key(key)[0]
    except ValueError:
        return None


def parse_partition_key(key: str) -> tuple[str, str]:
    """(root name, checkpoint path relative to that root)."""
    root_name, sep, rel = key.partition(":")
    if not sep or not root_name:
        raise ValueError(f"not a checkpoint partition key: {key!r} (expected '<root>:<path>')")
    return root_name, "" if rel == "." else unquote(rel)
