"""Reading a checkpoint's state files: changelog headers and records, snapshot zips, and bytes
checked against Spark's `.crc` sidecars. The reads of the model (`Checkpoint` has them): the model
holds what it was built from; what it reads on demand, and how, is here."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from checkpoint.errors import CheckpointError, CorruptFileError
from checkpoint.format import (
    CODEC_CONF,
    SIDECAR_BYTES,
    ZIP_WHOLE_BYTES,
    ChangelogHeader,
    ChangeRecord,
    Checksumming,
    RecordRun,
    Snapshot,
    change_records,
    check_zip,
    count_records,
    crc32c_signed,
    parse_sidecar,
    read_changelog_runs,
    read_header,
    read_snapshot,
    sidecar_agrees,
    sidecar_matches,
    signed,
    stream_changelog_runs,
)
from checkpoint.model.files import CheckpointFile
from checkpoint.policy import POLICY
from checkpoint.storage import Storage

# A lineage header is at most 64 KiB + 2, i.e. at most three 32 KiB lz4 blocks: read that much at once.
_HEADER_READ = 128 * 1024
_HEADER_PREFETCH = 32 * 1024  # the first lz4 block, where a lineage header starts (and most end)


class StateFileReads:
    """The state-file reads of a checkpoint's model, over its `storage`, the codec its newest offset
    conf names, and what its loader read already (`prefetched`)."""

    if TYPE_CHECKING:
        storage: Storage
        batches: dict[int, Any]
        prefetched: dict[str, Any]

    @cached_property
    def changelog_codec(self) -> str:
        """The codec of the newest offset conf; Spark's default is lz4. Kept once found: the model
        is immutable, and a plan reads a changelog header per retained batch and partition."""
        for batch in sorted(self.batches.values(), key=lambda b: -b.id):
            if batch.offset is not None and CODEC_CONF in batch.offset.conf:
                return batch.offset.conf[CODEC_CONF]
        return "lz4"

    # Reading state files. A V2 name (with an id) must hold a v3/v4 changelog.

    def _prefetched(self, rel: str):
        got = self.prefetched.get(rel)
        if isinstance(got, CheckpointError):
            raise got
        return got

    def read_changelog_header(self, f: CheckpointFile) -> ChangelogHeader:
        """Version and lineage from the first block(s) only: one ranged read, even on object stores."""
        if (known := self._prefetched(f.rel)) is not None:
            return known
        with self.storage.open(f.rel, block_size=_HEADER_READ, size=f.info.size) as fh:
            return self._header(f, fh.read)

    def read_changelog_headers(
        self, files: Sequence[CheckpointFile]
    ) -> Iterator[tuple[CheckpointFile, ChangelogHeader]]:
        """Each changelog's header as `read_changelog_header` gives it, in the order given; raises
        at the first that cannot be read. The first block of each is read with the others'
        (`Storage.read_heads`: at once on object stores, after a read-ahead hint locally), and a
        header that runs past it is read on from there."""
        heads = self.storage.read_heads(
            (f.info for f in files if f.rel not in self.prefetched), _HEADER_PREFETCH
        )
        for f in files:
            known = self._prefetched(f.rel)
            if known is None:
                with self.storage.read_on(next(heads), f.info, _HEADER_READ) as rest:
                    known = self._header(f, rest.read)
            yield f, known

    def _header(self, f: CheckpointFile, read: Callable[[int], bytes]) -> ChangelogHeader:
        return read_header(read, self.changelog_codec, self.storage.full(f.rel), named_v2=f.what.carries_id)

    def read_changelog(
        self, f: CheckpointFile, data: bytes | None = None
    ) -> tuple[ChangelogHeader, list[ChangeRecord]]:
        """Every record; `data` saves the read when the caller already holds the file's bytes."""
        if data is None:
            data = self.storage.read_bytes(f.rel, limit=f.info.size)  # the size it was listed with
        header, runs = self.read_changelog_runs(f, data)
        return header, change_records(runs)

    def read_changelog_stream(
        self, f: CheckpointFile, read: Callable[[int], bytes]
    ) -> tuple[ChangelogHeader, list[RecordRun]]:
        """The records in runs, decoded from `read` as it is pulled (block checksums checked)."""
        named_v2 = f.what.carries_id
        return read_changelog_runs(read, self.changelog_codec, self.storage.full(f.rel), named_v2=named_v2)

    def stream_verified(self, f: CheckpointFile, chunk: int) -> Iterator[list[RecordRun]]:
        """A changelog's records, a part of about `chunk` decoded bytes at a time, as it is read
        (a chunk of the file in memory, never the file); once the last part is given, the bytes
        read are checked against its Spark `.crc` sidecar when it has one (CorruptFileError on a
        mismatch: the caller has published nothing built on them yet)."""
        with self.storage.open(f.rel, block_size=POLICY.copy_chunk_bytes, size=f.info.size) as fh:
            tee = Checksumming(fh.read)
            yield from stream_changelog_runs(
                tee.read, self.changelog_codec, self.storage.full(f.rel), chunk, named_v2=f.what.carries_id
            )
            tee.drain(POLICY.copy_chunk_bytes)
        self._check_sidecar(f.rel, tee.size, signed(tee.crc))

    def count_records(self, f: CheckpointFile, read: Callable[[int], bytes]) -> int:
        """How many records a changelog, delta or snapshot holds, decoded from `read` as it is
        pulled and checked as Spark's load reads its kind, a chunk at a time (validation's deep
        read)."""
        full = self.storage.full(f.rel)
        return count_records(f.kind, read, self.changelog_codec, full, named_v2=f.what.carries_id)

    def check_zip(self, f: CheckpointFile) -> None:
        """A snapshot zip's every entry against its CRC-32, as RocksDB's load unpacks it
        (validation's deep read), through a handle of its own that seeks: an entry is inflated a
        chunk at a time, the zip never held whole."""
        with self.storage.open(f.rel, size=f.info.size) as fh:
            check_zip(fh, self.storage.full(f.rel))

    def read_changelog_runs(self, f: CheckpointFile, data: bytes) -> tuple[ChangelogHeader, list[RecordRun]]:
        """The records in runs, of a changelog whose bytes the caller holds: the rebuild's hot path."""
        return self.read_changelog_stream(f, io.BytesIO(data).read)

    def read_snapshot(self, f: CheckpointFile) -> Snapshot:
        if (known := self._prefetched(f.rel)) is not None:
            return known
        if f.info.size <= ZIP_WHOLE_BYTES:
            # A snapshot zip holds only RocksDB's small files (SSTs live beside it): one GET reads
            # it whole, where zipfile's seeks would cost three or four ranged GETs.
            data = self.storage.read_bytes(f.rel, limit=ZIP_WHOLE_BYTES)
            return read_snapshot(io.BytesIO(data), self.storage.full(f.rel))
        with self.storage.open(f.rel, size=f.info.size) as fh:
            return read_snapshot(fh, self.storage.full(f.rel))

    def read_verified(self, f: CheckpointFile) -> bytes:
        """A state file's bytes (at most the size it was listed with), checked against its Spark
        `.crc` sidecar (CRC32C and size) when it has one, whether or not the sidecar was listed:
        two GETs. Spark skips the check when the sidecar is absent, and so does this; a mismatch
        raises CorruptFileError, never returns."""
        rel = f.rel
        data = self.storage.read_bytes(rel, limit=f.info.size)
        self._check_sidecar(rel, len(data), crc32c_signed(data))
        return data

    def download_verified(
        self, rel: str, dest: str, size: int | None = None, chunk: int = POLICY.copy_chunk_bytes
    ) -> int:
        """`read_verified` for a file of any size: streamed to `dest` in chunks, its CRC32C computed on
        the way. Returns the bytes written; a mismatch raises CorruptFileError."""
        written, crc = self.storage.download(rel, dest, size, chunk)
        self._check_sidecar(rel, written, signed(crc))
        return written

    def _check_sidecar(self, rel: str, size: int, crc: int) -> None:
        raw = self.storage.read_if_exists(f"{rel}.crc", limit=SIDECAR_BYTES)
        if raw is None:
            return
        if not sidecar_agrees(parse_sidecar(raw, self.storage.full(f"{rel}.crc")), size, crc):
            raise CorruptFileError(
                f"the bytes ({size}) do not match the .crc sidecar (CRC32C and size): Spark refuses "
                "this file, and nothing may be built on it",
                self.storage.full(rel),
            )

    def sidecar_matches(self, crc: CheckpointFile, main_data: bytes | None = None) -> bool:
        """Whether a Spark `.crc` sidecar matches the bytes of its main file (read unless given)."""
        sidecar = parse_sidecar(
            self.storage.read_bytes(crc.rel, limit=SIDECAR_BYTES), self.storage.full(crc.rel)
        )
        if main_data is None:
            if crc.what.main is None:
                raise ValueError(f"{crc.rel} is not a .crc sidecar")
            main_data = self.storage.read_bytes(crc.what.main, limit=sidecar.main_file_size)
        return sidecar_matches(sidecar, main_data)
