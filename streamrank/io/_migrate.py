"""``streamrank migrate SRC DST``: a store of the previous layout (or a local store) copied into a repository.

Stores written at URLs before the Icechunk layout (a ``zarr.json`` at the
prefix, chunk objects beside it, the lease protocol) open read-only
(:func:`~streamrank.io._icechunk_repo.open_location`).  :func:`migrate`
verifies the source (every batch against its logged checksum), copies every
zarr document and chunk **byte for byte** into a new repository at ``DST`` —
one transaction, one commit ("migrate from SRC") — and verifies the copy the
same way; the commit record (counts, log, checksums, chunk bindings) is the
source's, so the copy is the same store, now appended to by transactions.
A local directory may be the source too (an upload).  Nothing is deleted at
the source.
"""
from __future__ import annotations

import os

__all__ = ["migrate"]

_PIECE = 16     # objects read and written at a time


def _source_keys(loc) -> list:
    """The zarr keys of the source (documents first, parents before children, then chunks)."""
    if isinstance(loc, str):
        keys = []
        for root, _dirs, files in os.walk(loc):
            for f in files:
                keys.append(os.path.relpath(os.path.join(root, f), loc).replace(os.sep, "/"))
    else:
        keys = loc.list()
    keys = [k for k in keys if not k.endswith(".partial") and not k.split("/")[-1].startswith(".")]
    docs = sorted((k for k in keys if k.split("/")[-1] == "zarr.json"), key=lambda k: (k.count("/"), k))
    chunks = sorted(k for k in keys if "/c/" in f"/{k}" and k not in docs)
    return docs + chunks


def _read(loc, keys):
    if isinstance(loc, str):
        out = []
        for k in keys:
            with open(os.path.join(loc, *k.split("/")), "rb") as f:
                out.append(f.read())
        return out
    return loc.read_many(keys)


def migrate(src, dst, storage_options=None, dst_storage_options=None) -> dict:
    """Copy the store at ``src`` into a new repository at ``dst`` (a URL), verified; returns a summary.

    ``storage_options`` apply to both unless ``dst_storage_options`` is given.
    Raises FileExistsError when ``dst`` holds a store, StoreFormatError when
    the source does not verify (nothing is written then) or the copy does not.
    """
    from .. import GroupStore, TupleStore
    from ._icechunk_repo import RepoLocation, creating
    from ._remote import is_url
    from ._writer import location
    from .schema import GROUP_FORMAT, TUPLE_FORMAT, StoreFormatError, read_attrs

    if not is_url(dst):
        raise ValueError(f"streamrank migrate: the destination must be a URL (s3://, gs://, az://), got {dst}")
    dst_opts = storage_options if dst_storage_options is None else dst_storage_options
    src_opts = storage_options if is_url(src) else None
    name, loc = location(src, src_opts)
    attrs = read_attrs(loc)
    kind = {GROUP_FORMAT: GroupStore, TUPLE_FORMAT: TupleStore}.get(attrs.get("format"))
    if kind is None:
        raise StoreFormatError(f"{name} is a zarr group but not a streamrank store")
    source = kind.open(src, storage_options=src_opts)
    n_batches = source.verify()                            # a damaged source is not copied
    target = RepoLocation(str(dst), dst_opts)
    keys = _source_keys(loc)
    copied = nbytes = 0
    with creating(target, overwrite=False):
        for i in range(0, len(keys), _PIECE):
            part = keys[i : i + _PIECE]
            for k, data in zip(part, _read(loc, part)):
                if data is None:
                    raise StoreFormatError(f"{name}/{k} vanished while it was copied; nothing was committed")
                target.write(k, data)
                copied += 1
                nbytes += len(data)
        snapshot = target.commit(f"migrate from {name}", {"streamrank": "migrate", "source": name})
    copy = kind.open(dst, storage_options=dst_opts)
    got = copy.verify()
    if got != n_batches or copy._attrs != source._attrs:
        raise StoreFormatError(f"{dst}: the copy of {name} does not verify as the source does ({got} of "
                               f"{n_batches} batches; commit records equal: {copy._attrs == source._attrs})")
    return {"source": name, "destination": target.url, "objects": copied, "bytes": nbytes, "batches": got,
            "snapshot": snapshot}
