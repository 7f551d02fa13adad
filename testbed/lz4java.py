"""Writes lz4-java's LZ4BlockOutputStream framing, to derive streams from real changelog contents.

The reader under test must accept what this writes; the corpus proves it accepts what Spark writes.
"""

from __future__ import annotations

import struct

import lz4.block
import xxhash


def frame(data: bytes, block_size: int = 32 * 1024) -> bytes:
    level = max(0, (block_size - 1).bit_length() - 10)
    out = []
    for start in range(0, len(data), block_size):
        chunk = data[start : start + block_size]
        packed = lz4.block.compress(chunk, store_size=False)
        method, payload = (0x20, packed) if len(packed) < len(chunk) else (0x10, chunk)
        check = xxhash.xxh32_intdigest(chunk, seed=0x9747B28C) & 0x0FFFFFFF
        out.append(
            struct.pack("<8sBiii", b"LZ4Block", method | level, len(payload), len(chunk), check) + payload
        )
    out.append(struct.pack("<8sBiii", b"LZ4Block", 0x10 | level, 0, 0, 0))
    return b"".join(out)


def java_utf(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw
