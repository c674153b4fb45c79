"""Where a store lives and who may write it: its location, the writer lock and (re-)creation.

A store's *location* is a local directory (a path string) or, at a URL, a
:class:`~streamrank.io._icechunk_repo.RepoLocation` (an Icechunk repository;
a :class:`~streamrank.io._remote.Remote` for a store of the previous layout,
read-only).  The same
three operations serve both stores (:class:`~streamrank.GroupStore`,
:class:`~streamrank.TupleStore`) in both places:

* :func:`writer_lock` — one writer at a time.  Locally an advisory ``flock``
  on ``<store>/.streamrank.lock`` (released by the OS if the writer dies) and
  the commit is an atomic rename (:func:`write_attrs`);
  at a URL no lock: the append is an Icechunk transaction, committed in one
  commit or refused (:mod:`streamrank.io._icechunk_repo`).
* :func:`creating_store` — an empty store place held under that lock (only a
  zarr store or an empty place is ever emptied).
* :func:`zarr_store` — zarr's own store for the location: ``LocalStore``, or
  the repository session's store (``FsspecStore`` for the previous layout)
  wrapped so a missing chunk is an error.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from ._remote import Remote, is_url, local_path

__all__ = ["LOCK_NAME", "location", "writer_lock", "creating_store", "new_store_id", "zarr_store", "writing",
           "check_same_store", "write_attrs"]

LOCK_NAME = ".streamrank.lock"


def location(path, storage_options=None, as_of=None, mode=None):
    """``(name, loc)``: the store's name for messages and attributes, and its location (str path or Remote)."""
    if is_url(path):
        from ._icechunk_repo import open_location

        remote = open_location(str(path), storage_options, as_of=as_of)
        if mode == "a" and as_of is not None:
            raise ValueError(f"{remote.url}: a store opened as of {as_of!r} is read-only (mode='r')")
        if getattr(remote, "legacy", False) and mode is not None:
            from ._icechunk_repo import legacy_hint

            if mode == "a":
                raise PermissionError(legacy_hint(remote.url))
            import logging

            logging.getLogger("streamrank").warning(legacy_hint(remote.url))
        return remote.url, remote
    if as_of is not None:
        raise ValueError(f"as_of= (a tag) applies to stores at URLs (Icechunk repositories), not to {path}")
    if storage_options:
        raise ValueError(f"storage_options apply to stores at URLs (s3://…), not to the local path {path}")
    p = local_path(os.fspath(path))
    return p, p


@contextlib.contextmanager
def writer_lock(path, what: str = "appended to"):
    """Exclusive writer lock of the store at ``path`` (a local path or a Remote); one writer at a time."""
    if isinstance(path, Remote):
        from ._icechunk_repo import transaction

        with transaction(_repository(path, what)):
            yield None
        return
    import fcntl

    from .._shared_paths import open_lock_file, refuse_foreign_link

    refuse_foreign_link(path, "write a store")
    fd = open_lock_file(os.path.join(path, LOCK_NAME))   # never through a planted link
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{path} is being appended to (or re-created) by another process "
                               f"(lock {LOCK_NAME} is held); one writer at a time") from None
        yield None
    finally:
        os.close(fd)


@contextlib.contextmanager
def creating_store(p, overwrite: bool):
    """The place of a store about to be (re-)created, empty but for its lock, held under the writer lock.

    The lock is the one an appender of the old store holds, so re-creating a
    store while another process appends to it fails with the lock error (or
    the appender's next append finds the lock held), and an appender that
    opened the old store refuses to append to the new one (its ``store_id``
    changed).  Only a zarr store or an empty directory is ever emptied.
    """
    from .schema import check_store_path

    if isinstance(p, Remote):
        from ._icechunk_repo import creating

        with creating(_repository(p, "re-created"), overwrite):
            yield
        return
    from .._shared_paths import refuse_foreign_link

    p = Path(p)
    check_store_path(p)
    refuse_foreign_link(p, "re-create a store")
    if os.path.lexists(p):
        if not overwrite:
            raise FileExistsError(f"{p} already exists; pass overwrite=True to replace it")
        if not (p.is_dir() and ((p / "zarr.json").exists() or not any(c.name != LOCK_NAME for c in p.iterdir()))):
            raise FileExistsError(f"{p} exists and is not a zarr store; refusing to delete it")
    p.mkdir(parents=True, exist_ok=True)
    with writer_lock(str(p)):
        for child in p.iterdir():
            if child.name == LOCK_NAME:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        yield


def _repository(loc, what: str):
    """The Icechunk location a write at a URL goes through; a store of the previous layout is read-only."""
    from ._icechunk_repo import RepoLocation, legacy_hint

    if isinstance(loc, RepoLocation):
        return loc
    if getattr(loc, "legacy", False):
        raise PermissionError(legacy_hint(loc.url) + f"; it cannot be {what}")
    raise PermissionError(f"{loc.url}: stores at {loc.protocol}:// are read-only (appends and creation need an "
                          "Icechunk repository: s3://, gs://, az://)")


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


def new_store_id() -> str:
    """A random identity for a new store (what an appender checks it still writes to)."""
    import uuid

    return uuid.uuid4().hex


def zarr_store(loc, read_only: bool = False):
    """zarr's store for the location: LocalStore, or FsspecStore that refuses missing chunks (remote)."""
    import zarr

    if isinstance(loc, Remote):
        return strict_chunk_store(loc.zarr_store(read_only=read_only), loc.url)
    return zarr.storage.LocalStore(str(loc), read_only=read_only)


@contextlib.contextmanager
def writing(zstore):
    """While an append writes, zarr may read chunks that do not exist yet (a new chunk it fills in part)."""
    old = getattr(zstore, "strict", None)
    if old is None:
        yield
        return
    zstore.strict = False
    try:
        yield
    finally:
        zstore.strict = old


def check_same_store(store) -> None:
    """An appender re-reading the commit record refuses a store that was re-created since it opened it."""
    now = (store._attrs.get("store_id"), store._attrs.get("created"))
    if now != store._store_id:
        from .schema import StoreFormatError

        raise StoreFormatError(f"{store.path} was re-created (create(..., overwrite=True)) by another process "
                               "since this object opened it; nothing was appended. Open it again to append "
                               "to the new store")


def write_attrs(path, attrs: dict) -> None:
    """Replace the group attributes in one atomic write of ``zarr.json``.

    The new document goes to a temporary file in the same directory, is
    flushed to disk, and is renamed over ``zarr.json`` (``os.replace`` is
    atomic on POSIX): a reader — or a writer killed half-way — sees either the
    old or the new commit record, never a mixture.  This is the commit point
    of every append.  At a URL (a :class:`~streamrank.io._icechunk_repo.RepoLocation`)
    the document is written in the append's transaction and committed with
    everything else in one Icechunk commit (:meth:`RepoLocation.commit_attrs`).
    """
    if isinstance(path, Remote):
        _repository(path, "written").commit_attrs(attrs)     # one Icechunk commit (io/_icechunk_repo)
        return
    meta = Path(path) / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"] = attrs
    from .._tempfiles import temp_sibling

    fd, tmp = temp_sibling(meta)      # a new file of a random name: never a link planted at a predictable one
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, meta)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
