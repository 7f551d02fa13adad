"""Errors of the format core. Every one names the file (or root) it is about, so a person can act."""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class: something about a checkpoint could not be read or understood."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)

    def __reduce__(self):
        # Across a process boundary (cleanup planning's worker processes) as the same class, text
        # and fields, whatever arguments a subclass's __init__ takes.
        return _restore, (type(self), str(self), self.__dict__)


def _restore(cls: type[CheckpointError], text: str, fields: dict) -> CheckpointError:
    error = cls.__new__(cls)
    Exception.__init__(error, text)
    error.__dict__.update(fields)
    return error


class NotACheckpointError(CheckpointError):
    """The path does not exist, or holds nothing a streaming query wrote."""


class StorageError(CheckpointError):
    """Listing or reading failed (permissions, network, a listing cut short)."""


class UnknownFormatVersionError(CheckpointError):
    """A file declares a format version this release does not know: never guess its layout."""

    def __init__(self, path: str, version: str, supported: tuple[str, ...]):
        self.version = version
        super().__init__(
            f"unknown format version {version!r} (this release reads {', '.join(supported)})", path
        )


class CorruptFileError(CheckpointError):
    """A file is empty, truncated, or fails its checksum or parse."""
