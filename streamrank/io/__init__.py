"""Stores and block sources: zarr group/tuple stores, numpy/scipy/dask wrappers.

The stores and sources live in their own modules (:mod:`streamrank.io.group_store`,
:mod:`streamrank.io.tuple_store`, :mod:`streamrank.io.sources`, ...; the common ones are also
``streamrank.GroupStore`` etc.).  This package itself names the building blocks a pipeline written
on top of the stores needs (the nightly pipeline uses exactly these), imported on first use so that
``import streamrank.io`` stays free:

Object storage (a store, or a models directory, at ``s3://...``; ``gs://``, ``az://``)
    :func:`is_url` tells a URL from a local path (``file://`` is local).  A store or a nightly
    models directory there is an Icechunk repository (:mod:`streamrank.io._icechunk_repo`):
    :func:`open_location` gives its :class:`RepoLocation` (a write is a transaction, committed in
    one commit; an overlapping commit is refused with :class:`CommitConflict` naming the winner),
    :func:`tag_branch_tip` tags it (models in it: ``streamrank.persistence.read_repo_model``).
    :class:`Remote` is one prefix on an fsspec filesystem (plain object reads: stores and models
    of the previous layout, read-only).
Ingesting in chunks
    :func:`with_last` pairs each chunk of a reader (:func:`~streamrank.io.npz.iter_npz`,
    :func:`~streamrank.io.svmlight.iter_svmlight`, :func:`~streamrank.io.parquet.iter_parquet`) with
    whether it is the last one, so the final append can carry the batch id that marks a file
    complete.  :func:`~streamrank.io.groups.offending_row` names the row an append's query-id
    check refused; :func:`~streamrank.io.tuple_copy.copy_tuple_store` copies a tuple store into
    another in bounded, resumable pieces.

>>> from streamrank.io import is_url
>>> is_url("s3://bucket/store"), is_url("file:///data/store"), is_url("data/store")
(True, False, False)
"""
from __future__ import annotations

#: public name -> the module that defines it (imported on first use: fsspec, threads, sockets)
_HOMES = {
    "is_url": "streamrank.io._remote",
    "Remote": "streamrank.io._remote",
    "RepoLocation": "streamrank.io._icechunk_repo",
    "CommitConflict": "streamrank.io._icechunk_repo",
    "open_location": "streamrank.io._icechunk_repo",
    "tag_branch_tip": "streamrank.io._icechunk_repo",
    "with_last": "streamrank._itertools",
    "open_lock_file": "streamrank._shared_paths",
    "refuse_foreign_link": "streamrank._shared_paths",
}

__all__ = ["CommitConflict", "Remote", "RepoLocation", "is_url", "open_location", "open_lock_file",
           "refuse_foreign_link", "tag_branch_tip", "with_last"]


def __getattr__(name):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
