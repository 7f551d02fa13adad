"""Spark's checksum sidecars `<file>.crc` (Spark 4.1+, docs/format.md §6)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from checkpoint.errors import MALFORMED, CorruptFileError, UnknownFormatVersionError


@dataclass(frozen=True)
class Sidecar:
    algorithm: str
    value: int  # signed int32, as Java writes it
    main_file_size: int


def parse_sidecar(data: bytes, path: str) -> Sidecar:
    try:
        body = json.loads(data.decode("utf-8"))
        sidecar = Sidecar(str(body["algorithm"]), int(body["value"]), int(body["mainFileSize"]))
    except MALFORMED as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CorruptFileError(f"malformed checksum sidecar: {exc}", path) from exc
    if sidecar.algorithm.upper() != "CRC32C":
        raise UnknownFormatVersionError(path, f"checksum algorithm {sidecar.algorithm}", ("CRC32C",))
    return sidecar


def signed(value: int) -> int:
    """An unsigned CRC32C as Java's int, the way sidecars record it."""
    return value - (1 << 32) if value >= 1 << 31 else value


def _crc32c(data: bytes, value: int = 0) -> int:
    # Imported on first use: the package reads its own distribution's metadata when imported, a
    # twentieth of a second that a command checking no sidecar need not pay.
    from crc32c import crc32c

    return crc32c(data, value)


def crc32c_signed(data: bytes) -> int:
    return signed(_crc32c(data))


def sidecar_agrees(sidecar: Sidecar, size: int, crc: int) -> bool:
    """Whether a file of `size` bytes whose signed CRC32C is `crc` is what the sidecar recorded."""
    return (sidecar.main_file_size, sidecar.value) == (size, crc)


class Checksumming:
    """A reader that passes bytes through and keeps their CRC32C and count: a file checked against
    its sidecar while something else reads it, one chunk in memory."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read, self.crc, self.size = read, 0, 0

    def read(self, n: int = -1) -> bytes:
        data = self._read(n)
        self.crc, self.size = _crc32c(data, self.crc), self.size + len(data)
        return data

    def drain(self, chunk: int) -> None:
        """Reads the rest, so that the CRC covers the whole file."""
        while self.read(chunk):
            pass

    def agrees(self, sidecar: Sidecar) -> bool:
        return sidecar_agrees(sidecar, self.size, signed(self.crc))


def sidecar_matches(sidecar: Sidecar, data: bytes) -> bool:
    return sidecar_agrees(sidecar, len(data), crc32c_signed(data))


# Hadoop's own checksum file `.<name>.crc`, which its local file system (a ChecksumFileSystem)
# writes beside every file: the header `crc\0`, the bytes per checksum as a big-endian int, then
# the zlib CRC-32 of each chunk of that many bytes, big-endian.
_HADOOP_MAGIC = b"crc\0"
_HADOOP_MAX_CHUNK = 1 << 24


def check_hadoop_crc(read: Callable[[int], bytes], crc: bytes, path: str) -> int:
    """Checks the bytes `read` yields against Hadoop's checksum file of them, a chunk at a time;
    returns the bytes checked. Raises CorruptFileError on a mismatch, a malformed checksum file,
    or a file longer or shorter than the checksums cover."""
    if len(crc) < 8 or crc[:4] != _HADOOP_MAGIC:
        raise CorruptFileError("malformed Hadoop checksum file (no crc header)", path)
    chunk = int.from_bytes(crc[4:8], "big")
    if not 0 < chunk <= _HADOOP_MAX_CHUNK or (len(crc) - 8) % 4:
        raise CorruptFileError(f"malformed Hadoop checksum file (chunk {chunk}, {len(crc)} bytes)", path)
    expected = [int.from_bytes(crc[i : i + 4], "big") for i in range(8, len(crc), 4)]
    size = 0
    for n, want in enumerate(expected):
        block = read(chunk)
        if not block or (len(block) < chunk and n < len(expected) - 1):
            raise CorruptFileError(
                f"shorter than its Hadoop checksums cover (chunk {n} of {len(expected)})", path
            )
        if zlib.crc32(block) != want:
            raise CorruptFileError(f"Hadoop checksum mismatch in bytes {size}-{size + len(block)}", path)
        size += len(block)
    if read(1):
        raise CorruptFileError("longer than its Hadoop checksums cover", path)
    return size
