"""Spark's checksum sidecars `<file>.crc` (Spark 4.1+, docs/format.md §6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import crc32c as _crc32c

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


def crc32c_signed(data: bytes) -> int:
    return signed(_crc32c.crc32c(data))


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
        self.crc, self.size = _crc32c.crc32c(data, self.crc), self.size + len(data)
        return data

    def drain(self, chunk: int) -> None:
        """Reads the rest, so that the CRC covers the whole file."""
        while self.read(chunk):
            pass

    def agrees(self, sidecar: Sidecar) -> bool:
        return sidecar_agrees(sidecar, self.size, signed(self.crc))


def sidecar_matches(sidecar: Sidecar, data: bytes) -> bool:
    return sidecar_agrees(sidecar, len(data), crc32c_signed(data))
