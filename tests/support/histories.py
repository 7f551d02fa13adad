"""Two synthetic checkpoints that differ only in older history (`testbed.synthetic`: 35 and 155
versions a store), written onto an object store as its connector writes them (no Hadoop
checksums): what the read paths and the commit sensor's idle tick must cost alike."""

from __future__ import annotations

from testbed import synthetic
from testbed.copying import hadoop_checksum


def write_histories(fs, base: str, protocol: str, stores: int) -> dict[str, str]:
    """`small` and `big` under `base` (`bucket/folder` on `fs`), each with `stores` stores: their
    URLs by name."""
    urls = {}
    for name, versions in (("small", 35), ("big", 155)):
        content = synthetic.files(stores, versions, window=20)
        fs.pipe({f"{base}/{name}/{rel}": data for rel, data in content.items() if not hadoop_checksum(rel)})
        urls[name] = f"{protocol}://{base}/{name}"
    return urls
