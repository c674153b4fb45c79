"""Where a store lives and who may write it: its location, the writer lock and (re-)creation.

A store's *location* is a local directory (a path string) or a
:class:`~streamrank.io._remote.Remote` (a URL on object storage).  The same
three operations serve both stores (:class:`~streamrank.GroupStore`,
:class:`~streamrank.TupleStore`) in both places:

* :func:`writer_lock` — one writer at a time.  Locally an advisory ``flock``
  on ``<store>/.streamrank.lock`` (released by the OS if the writer dies) and
  the commit is an atomic rename (:func:`streamrank.io.schema.write_attrs`);
  at a URL a lease held through conditional writes and a conditional commit
  (:mod:`streamrank.io._remote_commit`, where the protocol is written down).
* :func:`creating_store` — an empty store place held under that lock (only a
  zarr store or an empty place is ever emptied).
* :func:`zarr_store` — zarr's own store for the location: ``LocalStore``, or
  ``FsspecStore`` wrapped so a missing chunk is an error.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from ._remote import Remote, is_url, local_path

__all__ = ["LOCK_NAME", "location", "writer_lock", "creating_store", "new_store_id", "zarr_store", "writing",
           "check_same_store"]

LOCK_NAME = ".streamrank.lock"


def location(path, storage_options=None):
    """``(name, loc)``: the store's name for messages and attributes, and its location (str path or Remote)."""
    if is_url(path):
        remote = Remote(str(path), storage_options)
        return remote.url, remote
    if storage_options:
        raise ValueError(f"storage_options apply to stores at URLs (s3://…), not to the local path {path}")
    p = local_path(os.fspath(path))
    return p, p


@contextlib.contextmanager
def writer_lock(path, what: str = "appended to"):
    """Exclusive writer lock of the store at ``path`` (a local path or a Remote); one writer at a time."""
    if isinstance(path, Remote):
        from ._remote_commit import remote_writer

        with remote_writer(path, what) as lease:
            yield lease
        return
    import fcntl

    from .._shared_paths import open_lock_file

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
        from ._remote_commit import creating_remote

        with creating_remote(p, overwrite):
            yield
        return
    p = Path(p)
    check_store_path(p)
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


def new_store_id() -> str:
    """A random identity for a new store (what an appender checks it still writes to)."""
    import uuid

    return uuid.uuid4().hex


def zarr_store(loc, read_only: bool = False):
    """zarr's store for the location: LocalStore, or FsspecStore that refuses missing chunks (remote)."""
    import zarr

    if isinstance(loc, Remote):
        from ._remote_commit import strict_chunk_store

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
