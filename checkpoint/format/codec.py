"""The compressed streams Spark writes changelogs in (docs/format.md §3).

lz4 is lz4-java's LZ4BlockOutputStream framing, not the LZ4 frame format. Blocks are decompressed
lazily, so reading a changelog's header costs one or two blocks, not the whole file.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import IO, cast

import lz4.block
import xxhash
import zstandard

from checkpoint.errors import CorruptFileError, UnknownFormatVersionError

LZ4_MAGIC = b"LZ4Block"
_LZ4_HEADER = struct.Struct("<8sBiii")  # magic, token, compressed len, decompressed len, checksum
_METHOD_RAW, _METHOD_LZ4 = 0x10, 0x20
_XXHASH_SEED = 0x9747B28C  # lz4-java's default seed
_CHECKSUM_MASK = 0x0FFFFFFF  # StreamingXXHash32.asChecksum() keeps 28 bits

Read = Callable[[int], bytes]


def _read_exact(read: Read, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Lz4BlockReader:
    """Readable stream over lz4-java blocks; each block's XXHash32 is checked as it is decoded."""

    def __init__(self, read: Read, path: str):
        self._read, self.path = read, path
        self._buf = b""
        self._pos = 0
        self._eof = False
        self.blocks = 0

    def _next_block(self) -> bytes | None:
        """The next block's content, checked; None at the end-of-stream block."""
        header = _read_exact(self._read, _LZ4_HEADER.size)
        if not header:
            raise CorruptFileError("truncated lz4 stream: no end-of-stream block", self.path)
        if len(header) < _LZ4_HEADER.size:
            raise CorruptFileError(f"truncated lz4 block header in block {self.blocks}", self.path)
        magic, token, clen, dlen, checksum = _LZ4_HEADER.unpack(header)
        if magic != LZ4_MAGIC:
            raise CorruptFileError(f"bad lz4 block magic {magic!r} in block {self.blocks}", self.path)
        method = token & 0xF0
        if method not in (_METHOD_RAW, _METHOD_LZ4):
            raise CorruptFileError(f"unknown lz4 block method 0x{method:02x}", self.path)
        max_len = 1 << ((token & 0x0F) + 10)
        if dlen == 0 and clen == 0:
            self._eof = True
            return None
        if not (0 < dlen <= max_len and 0 < clen <= max_len) or (method == _METHOD_RAW and clen != dlen):
            raise CorruptFileError(
                f"bad lz4 block lengths ({clen}, {dlen}) in block {self.blocks}", self.path
            )
        data = _read_exact(self._read, clen)
        if len(data) < clen:
            raise CorruptFileError(f"truncated lz4 block {self.blocks}", self.path)
        if method == _METHOD_LZ4:
            try:
                data = lz4.block.decompress(data, uncompressed_size=dlen)
            except lz4.block.LZ4BlockError as exc:
                raise CorruptFileError(
                    f"lz4 block {self.blocks} does not decompress: {exc}", self.path
                ) from exc
            if len(data) != dlen:
                raise CorruptFileError(f"lz4 block {self.blocks} decompressed to a wrong length", self.path)
        if (xxhash.xxh32_intdigest(data, seed=_XXHASH_SEED) & _CHECKSUM_MASK) != (checksum & _CHECKSUM_MASK):
            raise CorruptFileError(f"checksum mismatch in lz4 block {self.blocks}", self.path)
        self.blocks += 1
        return data

    def read(self, n: int = -1) -> bytes:
        buf, pos = self._buf, self._pos
        if 0 <= n <= len(buf) - pos:
            # From the block at hand, without copying what is left of it: a lineage header is read
            # a few bytes at a time from a block of Spark's lz4 block size (32 KiB by default).
            self._pos = pos + n
            return buf[pos : pos + n]
        # Blocks are collected and joined once: appending each to the buffer is quadratic.
        parts, have = [buf[pos:]], len(buf) - pos
        while (n < 0 or have < n) and not self._eof:
            block = self._next_block()
            if block is None:
                break
            parts.append(block)
            have += len(block)
        data = b"".join(parts) if len(parts) > 1 else parts[0]
        take = len(data) if n < 0 else min(n, len(data))
        self._buf, self._pos = data, take
        return data[:take]


class ZstdReader:
    """zstd-jni writes standard zstd frames; a stream may hold several."""

    def __init__(self, read: Read, path: str):
        self.path = path
        # zstandard reads its source with `.read(n)` only: a whole file object is not needed.
        source = cast(IO[bytes], _Readable(read))
        self._reader = zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True)

    def read(self, n: int = -1) -> bytes:
        try:
            return self._reader.read(n) if n >= 0 else self._reader.readall()
        except zstandard.ZstdError as exc:
            raise CorruptFileError(f"zstd stream does not decompress: {exc}", self.path) from exc


class _Readable:
    def __init__(self, read: Read):
        self.read = read


CODECS = ("lz4", "zstd")


def decompressing_reader(read: Read, codec: str, path: str) -> Lz4BlockReader | ZstdReader:
    """A reader of the decompressed bytes; `codec` comes from the offset conf (default lz4)."""
    codec = (codec or "lz4").lower()
    if codec == "lz4":
        return Lz4BlockReader(read, path)
    if codec == "zstd":
        return ZstdReader(read, path)
    raise UnknownFormatVersionError(path, f"codec {codec}", CODECS)
