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


# What interpreting untrusted JSON can raise besides a parse error: a field of the wrong type
# (TypeError, AttributeError), a missing one (KeyError), a number too large for int() or made of
# 4,300 digits and more (OverflowError, ValueError), nesting deeper than the parser recurses
# (RecursionError). A reader turns each into CorruptFileError: a refusal, never a traceback.
MALFORMED = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


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


class GcError(CheckpointError):
    """Cleanup refused: the message says why; nothing was deleted."""


class RebuildError(CheckpointError):
    """The store cannot be rebuilt safely; nothing was published."""
