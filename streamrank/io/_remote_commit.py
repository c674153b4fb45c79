"""The append commit protocol of a store on object storage (``s3://…``): no rename, no ``flock``.

A local store commits an append by renaming a new ``zarr.json`` over the old
one under an ``flock`` (:mod:`streamrank.io.schema`).  Object storage has
neither, but it has two properties the protocol is built on: **a PUT of one
object is atomic** (a reader gets the old or the new object whole, never a
mixture), and **conditional writes** (``If-None-Match: *`` creates only what
does not exist; ``If-Match: <etag>`` replaces only what was not changed
since it was read).

The objects
-----------
* data chunks ``<array>/c/<i>[/0]`` — written by zarr, one PUT each;
* the **commit record**: the group's ``zarr.json``, whose attributes hold the
  committed counts, the append log (batch id, row ranges, checksum) and the
  CRC-32C of each full chunk.  Readers use only the committed counts, never
  the array shapes, so anything past them is invisible;
* the **writer lease** ``.streamrank.lock`` (:mod:`streamrank.io._lease`).

An append
---------
1. Take the lease (``If-None-Match: *``; or take over an *expired* one with
   ``If-Match``).  A live lease held by another writer: refused at once with
   :class:`~streamrank.io._lease.WriterLockHeld` naming it — nothing written.
2. Read the commit record **and its ETag** (one GET).  If the lease was taken
   over from a writer that may still be alive somewhere (stalled, cut off),
   **fence** it first: rewrite the commit record unchanged but for a
   ``writer_epoch`` counter, with ``If-Match`` — from then on that old writer's
   commit, conditional on the ETag *it* read, can only fail.
3. Skip the batch if its id is in the log (idempotent re-runs); validate the
   whole batch before writing anything.
4. **Torn-tail repair**: arrays longer than the committed counts (a writer
   died after growing them) are cut back to the committed length; the chunks
   zarr deletes lie wholly past the committed rows, and the last, partly
   filled chunk keeps its committed rows (it is rewritten whole by the next
   write).  Committed data is never deleted: what is committed is defined by
   the commit record, which repair does not touch.
5. Write the data chunks past the committed length (one PUT per chunk; the
   partly filled last chunk is rewritten whole — its committed rows
   unchanged), checking the lease before each array.
6. **Commit**: PUT the new commit record with ``If-Match: <ETag from step 2>``.
   This single conditional PUT is the commit point.  If it fails, another
   writer took the lease over meanwhile: the append raises
   :class:`~streamrank.io._lease.LeaseLost` and nothing of it is visible.
7. Release the lease (``DELETE`` with ``If-Match``).

Two writers racing
------------------
Both try step 1; S3 lets exactly one conditional create succeed.  The loser
gets ``WriterLockHeld`` ("… is being appended to by another writer (host,
pid, lease until …)") before it has written a byte; the winner's append
commits.  Nothing is lost: the loser's batch was not written and can be
appended again (same ``batch_id``: idempotent).  Two writers finding the same
expired lease race on ``If-Match`` of the lock: again exactly one wins.

A writer dying mid-append
-------------------------
Killed at any point before step 6, it leaves chunks past the committed counts
and a lease that nobody renews.  Readers see the store at its last commit.
The next writer takes the lease over — at once if the dead writer ran on the
same machine (its pid is gone), otherwise when the lease expires (60 s,
``STREAMRANK_LEASE_SECONDS``) — repairs the torn tail (step 4) and appends.
Re-running the dead writer's batch with the same ``batch_id`` appends it
exactly once: it was not in the log.  Killed after step 6, the batch is
committed and a re-run skips it.

What cannot be guaranteed, and what is refused
----------------------------------------------
* A writer stalled for longer than the lease while a data-chunk PUT is in
  flight can have that PUT land after another writer took over (S3 has no
  condition spanning two objects).  Its commit is fenced (step 2), but the
  late chunk may overwrite a chunk of the new writer: the commit record's
  chunk CRCs make the affected full chunks an error on read, and
  ``verify()`` names the batch.  Keep the lease longer than the client's
  request timeouts (the default 60 s is).
* Filesystems without conditional writes (anything but ``s3://`` and
  ``memory://`` here): stores there open read-only; ``create`` and ``append``
  raise :class:`~streamrank.io._remote.ConditionalWritesUnsupported`.
* Chunks are PUT by zarr as they are written; a writer does not delete chunks
  it wrote past the committed length when it fails — the next append's
  repair does.
"""
from __future__ import annotations

import contextlib
import json

from ._lease import LOCK_KEY, LeaseLost, WriterLease
from ._remote import CONDITIONAL, ConditionalWritesUnsupported, PreconditionFailed, Remote

__all__ = ["remote_writer", "creating_remote", "commit_remote", "strict_chunk_store"]


def _require_conditional(remote: Remote, what: str) -> None:
    if remote.protocol not in CONDITIONAL:
        raise ConditionalWritesUnsupported(
            f"{remote.url}: cannot {what}: {remote.protocol}:// offers no conditional writes here, so one writer at "
            f"a time cannot be guaranteed; stores there open read-only (writes work on "
            f"{', '.join(p + '://' for p in CONDITIONAL)} and local directories)")


@contextlib.contextmanager
def remote_writer(remote: Remote, what: str = "appended to"):
    """Steps 1, 2 and 7: hold the lease, read (and fence) the commit record; yields the lease.

    While inside, :func:`commit_remote` commits with ``If-Match`` on the
    commit record's ETag read here, and checks the lease first.
    """
    _require_conditional(remote, what.split()[0] if what else "write")
    with WriterLease(remote, what) as lease:
        try:
            _raw, etag = remote.read_with_etag("zarr.json")
        except FileNotFoundError:
            etag = None
        if lease.took_over is not None and etag is not None:
            etag = _fence(remote, _raw, etag)
        remote.lease, remote.expected_etag = lease, etag
        try:
            yield lease
        finally:
            remote.lease, remote.expected_etag = None, None


def _fence(remote: Remote, raw: bytes, etag: str) -> str:
    """Change the commit record's ETag (``writer_epoch`` + 1) so a taken-over writer's commit fails."""
    doc = json.loads(raw)
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    if not isinstance(attrs, dict):
        return etag                        # not a store's record: the caller's checks report it
    attrs["writer_epoch"] = int(attrs.get("writer_epoch", 0) or 0) + 1
    try:
        return remote.put_if_match("zarr.json", json.dumps(doc, indent=1).encode(), etag)
    except PreconditionFailed:            # the old writer committed in between: read again, fence again
        raw, etag = remote.read_with_etag("zarr.json")
        return _fence(remote, raw, etag)


def commit_remote(remote: Remote, attrs: dict) -> None:
    """Step 6: the new commit record in one conditional PUT (the commit point).

    Inside :func:`remote_writer` (an append) the PUT carries ``If-Match`` with
    the ETag read when the lease was taken: :class:`LeaseLost` if another
    writer took the lease over (nothing of this append is visible).  At
    creation (:func:`creating_remote`, no record yet) it is a plain PUT under
    the lease.
    """
    lease = getattr(remote, "lease", None)
    if lease is not None:
        lease.check()
    want = getattr(remote, "expected_etag", None)
    raw = remote.read("zarr.json")
    doc = json.loads(raw)
    doc["attributes"] = attrs
    new = json.dumps(doc, indent=1).encode()
    if want is None:
        if lease is None:
            raise RuntimeError(f"{remote.url}: a commit outside the writer lease (a bug)")
        remote.write("zarr.json", new)
        return
    try:
        remote.expected_etag = remote.put_if_match("zarr.json", new, want)
    except PreconditionFailed:
        raise LeaseLost(f"{remote.url}: the commit record changed since this writer took the lease (another "
                        "writer took the expired lease over); this append was not committed") from None


@contextlib.contextmanager
def creating_remote(remote: Remote, overwrite: bool):
    """A store about to be (re-)created at a URL: its prefix emptied (but for the lease), under the lease.

    Only a zarr store (a ``zarr.json`` at the prefix) or an empty prefix is
    ever emptied; otherwise FileExistsError.
    """
    _require_conditional(remote, "create a store")
    with WriterLease(remote, "re-created") as lease:
        keys = [k for k in remote.list() if k != LOCK_KEY]
        if keys:
            if not overwrite:
                raise FileExistsError(f"{remote.url} already exists; pass overwrite=True to replace it")
            if "zarr.json" not in keys:
                raise FileExistsError(f"{remote.url} exists and is not a zarr store; refusing to delete it")
            remote.fs.rm([remote.key(k) for k in keys])
        remote.lease, remote.expected_etag = lease, None
        try:
            yield lease
        finally:
            remote.lease = None


def strict_chunk_store(store, url: str):
    """zarr's store wrapped so that a missing chunk is an error, not the fill value (stores that write every chunk).

    ``wrapper.strict = False`` while an append writes (zarr reads a new
    chunk it is about to fill, which does not exist yet).
    """
    from zarr.storage import WrapperStore

    from .schema import StoreFormatError

    class StrictChunkStore(WrapperStore):
        strict = True

        async def get(self, key, prototype, byte_range=None):
            got = await self._store.get(key, prototype, byte_range)
            if got is None and self.strict and "/c/" in f"/{key}":
                raise StoreFormatError(f"{url}/{key}: chunk is missing (deleted after it was written: this store "
                                       "writes every chunk)")
            return got

    return StrictChunkStore(store)
