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


class UnprovenStorageError(StorageError):
    """A store no test of this project runs against: refused, or with the user's leave read and
    never written (docs/storage.md)."""


class UntrustedFileError(StorageError):
    """A path a checkpoint holds that is no regular file of its own: nothing of it was read."""


class OutsideCheckpointError(UntrustedFileError):
    """A file that resolves outside its checkpoint (a symlink, in its name or in a folder above it)."""


class NotARegularFileError(UntrustedFileError):
    """A FIFO, a device, a socket or a folder where Spark writes a file: opened without blocking,
    refused before any byte is read."""


class OversizedFileError(UntrustedFileError):
    """A file longer than what its kind ever holds: refused after the bound plus one byte."""


def read_failed(exc: BaseException) -> bool:
    """A read the storage failed (a file gone since its listing, a GET refused or cut), not one the
    door refused (a link, a FIFO, a file past its kind's bound): no finding may call the file
    corrupt for it."""
    return isinstance(exc, StorageError) and not isinstance(exc, UntrustedFileError)


class UnknownFormatVersionError(CheckpointError):
    """A file declares a format version this release does not know: never guess its layout."""

    def __init__(self, path: str, version: str, supported: tuple[str, ...]):
        self.version = version
        super().__init__(
            f"unknown format version {version!r} (this release reads {', '.join(supported)})", path
        )


class UnsupportedLayoutError(CheckpointError):
    """A readable file holds what this release cannot carry (a type it does not re-lay)."""


class CorruptFileError(CheckpointError):
    """A file is empty, truncated, or fails its checksum or parse."""


# What an action says when it does not finish, in two kinds the CLI maps to its exit codes once
# (cli/main.py) and Dagster shows as a failed step with the message.


class Refused(CheckpointError):
    """Refused before anything was written or deleted: the message says why (exit 2)."""


class SparkUnavailable(Refused):
    """The Spark session an action runs its tasks in could not be started (a master that is not
    one, or does not answer): refused before any store was touched."""


class SparkCannotReach(Refused):
    """The Spark session an action reads or writes the state in has no file system for the
    checkpoint's store (its Hadoop connector is not on the classpath): refused before anything
    was written."""


class Stopped(CheckpointError):
    """Stopped part-way: what was done is marked or put back, and the same action run again
    finishes it (exit 1). `label` opens the CLI's line."""

    label = "stopped"


class GcError(Refused):
    """Cleanup refused: the message says why; nothing was deleted."""


class CleanupStopped(Stopped):
    """A cleanup stopped part-way (its audit trail could not be written): what it deleted were
    orphans, and the same cleanup run again records and finishes the rest."""

    label = "cleanup stopped"


class RebuildError(Refused):
    """The store cannot be rebuilt safely; nothing was published."""


class CompactionRefused(Refused):
    """The checkpoint has error findings, or was written by a Spark whose snapshot format this
    release has not proven: nothing is planned, nothing is written."""


class CompactionDeferred(CompactionRefused):
    """A format V1 query that is running (or has not been quiet for long enough): its snapshot
    names carry no attempt id, so it is compacted once stopped. Not an error of the checkpoint:
    the orchestration skips it and looks again later; the CLI refuses (exit 2)."""


class OverlapRefused(Refused):
    """A two-sided action (fork, migration, a retirement's archive) whose destination and source
    overlap: refused before any lease is taken."""


class ForkRefused(Refused):
    """The fork was refused before anything was written."""


class ForkIncomplete(Stopped):
    """The fork stopped part-way: DEST is marked incomplete, and the same fork run again finishes it."""

    label = "fork incomplete"


class MigrationRefused(Refused):
    """The migration was refused before anything was written."""


class MigrationFailed(Stopped):
    """The migration stopped part-way: the destination is marked incomplete (validation refuses
    it), and the same migration run again starts it over."""

    label = "incomplete"


class RepartitionRefused(Refused):
    """Nothing was written: the message says why."""


class RepartitionFailed(Stopped):
    """The rewrite or its verification failed; the checkpoint was put back."""

    label = "repartition failed"


class RehearsalRefused(Refused):
    """A restart rehearsal that cannot start: no batch to replay, a query that is not one."""


class UnknownSparkVersion(Refused):
    """A Spark version the upgrade-readiness rules do not cover (`analysis.readiness`)."""


class RetirementRefused(Refused):
    """The retirement was refused, nothing deleted: not dormant, written since the plan, within the
    grace period, an archive that fails its check."""


class RetirementIncomplete(Stopped):
    """The retirement stopped part-way (files the store would not delete, the lease lost): every
    outcome is in the audit trail, and the same apply run again finishes it."""

    label = "retirement incomplete"


class PurgeRefused(Refused):
    """The purge of expired state was refused before anything was written: a running query, a
    purge time ahead of now, error findings, a store whose layout is not the one known."""


class PurgeIncomplete(Stopped):
    """A purge stopped part-way (a store's Spark task failed or died): each store is purged or
    not, and the same purge run again purges the rest."""

    label = "purge incomplete"


class LeaseHeld(Refused):
    """Another action holds the checkpoint's lease: nothing was done."""


class LeaseRefused(Refused):
    """A lease asked for with a time to live no action could hold it by: nothing was done."""


class LeaseUnreadable(CheckpointError):
    """A lease generation that cannot be read: never taken for free, since someone may hold it."""


class LeaseLost(CheckpointError):
    """This action's lease expired or was taken over: it must stop before changing anything more."""


class Abandoned(CheckpointError):
    """Work its caller gave up waiting for (a look past its timeout): no further request is sent."""
