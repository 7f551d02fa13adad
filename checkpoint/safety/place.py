"""Where a location really is, for every "inside / outside / overlaps" question an action asks
(docs/safety.md, "containment by place"): two spellings that reach one folder are one place.

A place is the protocol of the storage's URL and the root as the storage finds it (`Storage.resolved`, the
maintenance lease's identity): on a local disk symlinks resolved, even for a folder yet to be made
(its nearest existing parent resolved, then its name), a bind mount or a file system mounted twice
taken back to one mount, case folded where the disk ignores it; on an object store the one
spelling of its URL. Spellings are compared only after that: `fork SRC DEST`, where DEST is a link
to a folder inside SRC, overlaps SRC.

An action asks before it creates anything (a folder, a lease, a temp folder): the doors
(`door.TwoSided.held`, `door.InPlace.refuse_overlap`) call `refuse_overlap`, and a deployment's
roots call `Place.contains`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from checkpoint.errors import OverlapRefused
from checkpoint.storage import Storage, scheme_of


@dataclass(frozen=True)
class Place:
    protocol: str
    path: str  # resolved, without a trailing slash ("/" for a local disk's top)

    @staticmethod
    def of(storage: Storage) -> Place:
        # The protocol of the URL's one spelling (`az`, not adlfs' first name `abfs`): what messages show.
        return Place(scheme_of(storage.url), storage.resolved().root.rstrip("/") or "/")

    def contains(self, other: Place) -> bool:
        """Whether `other` is this place or lies below it."""
        if self.protocol != other.protocol:
            return False
        top = self.path.rstrip("/") + "/"
        return other.path == self.path or other.path.startswith(top)

    def overlaps(self, other: Place) -> bool:
        return self.contains(other) or other.contains(self)

    def __str__(self) -> str:
        return self.path if self.protocol in ("file", "local") else f"{self.protocol}://{self.path}"


def refuse_overlap(
    src: Storage, dest: Storage, what: str = "the destination", side: str = "the source"
) -> None:
    """`what` (a fork's DEST, an archive) at, inside or around `side` (the checkpoint it is written
    from) would write into what it reads, or delete it: refused, by place, before anything is
    created. The message names where a link took the spelling."""
    a, b = Place.of(src), Place.of(dest)
    if a.overlaps(b):
        _refuse(src, dest, b, what, side)


def refuse_inside(src: Storage, folder: Storage, what: str, side: str = "the source") -> None:
    """A folder in which the action makes a new one of its own (a rehearsal's scratch, an audit
    trail) refused at or inside `side` (the checkpoint read, or a DEST written), by place: around it
    is no overlap, since what is made there is new."""
    a, b = Place.of(src), Place.of(folder)
    if a.contains(b):
        _refuse(src, folder, b, what, side)


def _refuse(src: Storage, dest: Storage, place: Place, what: str, side: str = "the source") -> NoReturn:
    spelled = dest.root.rstrip("/") or "/"
    via = "" if str(place) in (spelled, dest.url) else f"; {what} resolves to {place}"
    raise OverlapRefused(f"{what} and {side} overlap ({src.url}{via}): nothing was written", dest.url)
