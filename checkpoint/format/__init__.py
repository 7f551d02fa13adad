"""The bytes Spark writes, read and (where the project must) written: where files live and what
their names say (`layout`), the metadata logs (`logs`), changelogs and their codecs (`changelog`,
`codec`), snapshot zips (`snapshot`) and Spark's checksum sidecars (`crc`). Nothing here reaches
storage: every reader takes bytes or a read function, so the fuzzers and the model share them."""

from checkpoint.format.layout import AUDIT_FOLDER, FileKind, classify

__all__ = ["AUDIT_FOLDER", "FileKind", "classify"]
