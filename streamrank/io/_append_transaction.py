"""One append transaction for both stores (:class:`~streamrank.GroupStore`, :class:`~streamrank.TupleStore`).

Every append to a store, on a local disk or on object storage, takes the same
seven steps; only *what* is validated and written differs, and the store
supplies that as an :class:`AppendParts`:

1. take the store's writer lock (:func:`streamrank.io._writer.writer_lock`:
   ``flock`` locally; at a URL a writable Icechunk session from the branch tip,
   no lock, :mod:`streamrank.io._icechunk_repo`);
2. re-read the commit record: if another process committed since this object
   read it, reload the store (and refuse one that was re-created,
   :func:`~streamrank.io._writer.check_same_store`); otherwise re-read the
   arrays' shapes (a killed local writer may have grown them);
3. skip a ``batch_id`` already in the log (idempotent re-runs; returns False);
4. validate the whole batch (``parts.validate``) before a byte is written;
5. cut a torn tail back to the committed lengths (:func:`repair_torn_tail`);
6. write the new data *beyond* the committed lengths (``parts.write``, which
   returns the new commit record: committed counts plus the log entry with the
   batch's checksum);
7. bind every chunk to its place (:func:`~streamrank.io._chunk_binding.commit_bindings`)
   and write the commit record **last**, in one atomic write
   (``parts.commit_record``: a rename locally; at a URL one Icechunk commit of
   every array and the record, or :class:`~streamrank.io._icechunk_repo.CommitConflict`
   naming the commit that won) — the commit point; then the store takes the
   new state (``parts.committed``).

Readers use only the committed counts, so a crash at any point leaves the
store readable at its previous commit, and the next append repairs the tail.
"""
from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from ._chunk_binding import TAIL_CRCS, commit_bindings
from ._writer import check_same_store, writer_lock, writing
from .schema import CHUNK_CRCS, cut_torn_tail, read_attrs

__all__ = ["AppendParts", "NewCommit", "append_transaction", "commit_time", "repair_torn_tail"]

logger = logging.getLogger("streamrank")


def commit_time() -> str:
    """The time stamp of a log entry (and of a store's creation): UTC, ISO 8601, milliseconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


class NewCommit(NamedTuple):
    """What step 6 wrote: the new commit record, the arrays (with their lengths) whose chunks it binds,
    and what else the store keeps of the batch once committed (``news``, passed to ``parts.committed``)."""

    attrs: dict
    arrays: dict
    lengths: dict
    news: Any = None


class AppendParts(NamedTuple):
    """The store-specific parts of an append (see the module docstring for when each is called).

    ``reopen_arrays()`` re-reads the arrays' shapes; ``validate()`` checks the
    batch and returns it as a tuple (raising before anything is written);
    ``repair()`` cuts the torn tail (the store's :func:`repair_torn_tail` call);
    ``write(*batch)`` writes it beyond the committed lengths and returns a
    :class:`NewCommit`; ``commit_record(loc, attrs)`` is the atomic write of the
    commit record; ``committed(new)`` updates the store object to the new commit.
    """

    reopen_arrays: Callable[[], Any]
    validate: Callable[[], tuple]
    repair: Callable[[], int]
    write: Callable[..., NewCommit]
    commit_record: Callable[[Any, dict], None]
    committed: Callable[[NewCommit], None]


def append_transaction(store, kind: str, batch_id: str | None, parts: AppendParts) -> bool:
    """Run one append of ``store`` (steps 1-7 of the module docstring); False if ``batch_id`` was committed.

    ``kind`` names the store in messages ("GroupStore").  ``store`` offers
    ``path``, ``_loc``, ``_zstore``, ``_attrs`` and ``_load()`` (its name,
    location, zarr store, commit record and reload), and takes ``_chunk_crcs``
    / ``_tail_crcs`` of the new commit.
    """
    with writer_lock(store._loc):
        now = read_attrs(store._loc)
        if (now.get("committed") != store._attrs.get("committed")
                or (now.get("store_id"), now.get("created")) != store._store_id):   # (re-created, even empty)
            store._load()  # another process committed since we opened
            check_same_store(store)
        else:
            parts.reopen_arrays()  # a killed writer may have grown them since
        if batch_id is not None and any(e.get("batch_id") == batch_id for e in store._attrs["log"]):
            logger.info("%s %s: batch %r is already committed; skipped", kind, store.path, batch_id)
            return False
        batch = parts.validate()
        with writing(store._zstore):
            parts.repair()
            new = parts.write(*batch)
            attrs = new.attrs
            attrs.update(commit_bindings(store._loc, new.arrays, new.lengths, attrs))   # every chunk bound
            parts.commit_record(store._loc, attrs)  # the commit point
            store._chunk_crcs, store._tail_crcs = attrs[CHUNK_CRCS], attrs[TAIL_CRCS]
            parts.committed(new)
    return True


def repair_torn_tail(store, kind: str, arrays: dict, lengths: dict, detail: str = "") -> int:
    """Step 5: remove a killed writer's partial files and cut ``arrays`` back to the committed ``lengths``.

    Returns the number of fixes (logged as a warning naming the store, with ``detail`` appended).
    """
    fixes = cut_torn_tail(store._loc, arrays, lengths)
    if fixes:
        logger.warning("%s %s: repaired a torn append (%d fix(es))%s", kind, store.path, fixes, detail)
    return fixes
