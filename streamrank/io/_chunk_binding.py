"""Every chunk of a store bound to its place: the commit record says which bytes belong where.

A per-chunk CRC-32C (zarr's ``crc32c`` codec) proves a chunk file is intact,
not that it is the chunk committed at that place: two chunk files swapped, a
chunk copied from another store, a replaced or deleted chunk all read with
valid checksums.  So the commit record (the group's ``zarr.json``, written
last by every append) also holds, for every array of the store:

* ``chunk_crc32c`` (:data:`~streamrank.io.schema.CHUNK_CRCS`): the CRC-32C
  trailer of each *full* chunk (:func:`~streamrank.io.schema.full_chunk_crcs`).
  Appends never rewrite a full chunk, so the trailer is fixed for good.
* ``tail_crc32c`` (:data:`TAIL_CRCS`): for an array whose committed length
  ends inside a chunk, ``[chunk, entries, crc]`` — the CRC-32C of the
  *decoded* bytes of the committed ``entries`` of that last chunk.  The next
  append rewrites that chunk's file (its trailer changes) but not its
  committed entries, so this binding holds for readers of the older commit
  and across a torn (killed) append alike.

Readers check both on every chunk they decode
(:class:`~streamrank.io._chunk_files.ChunkFileDecoder`): the row-chunked
arrays of a :class:`~streamrank.GroupStore` through their row readers, and
everything else read by slices — ``group_ptr``, ``qid``, the string query ids, the document ids and
every array of a :class:`~streamrank.TupleStore` — through
:class:`BoundArray`.  A chunk that is not the one committed there is a
:class:`~streamrank.io.schema.StoreFormatError` naming the chunk file.

Stores written by the previous version have neither attribute: they read as
before (nothing to compare with), and their first append records both for
all their chunks (the read-write upgrade path).
"""
from __future__ import annotations

import contextvars
import functools
import os
from pathlib import Path

import numpy as np

from ._chunk_files import ChunkFileDecoder
from .schema import CHUNK_CRCS, CheckedArray, StoreFormatError, full_chunk_crcs

__all__ = ["TAIL_CRCS", "BoundArray", "bound_array", "bound_decoder", "check_tail_crcs", "commit_bindings",
           "reads_unbound", "rebind"]

#: group attribute: per array, ``[chunk, entries, crc32c of the decoded committed entries]`` of its last,
#: partly filled chunk (absent when the committed length fills whole chunks)
TAIL_CRCS = "tail_crc32c"


_UNBOUND = contextvars.ContextVar("streamrank_reads_unbound", default=False)


def reads_unbound(method):
    """Decorator of ``verify()``: its reads skip the chunk bindings (this thread / task only).

    ``verify`` compares every *batch* with its logged checksum, which names
    the batch whose rows changed; a binding is per chunk, and a chunk (the
    last, shared one above all) holds rows of several batches, so its failure
    would name the first batch that touches it, not the one that changed.
    """
    @functools.wraps(method)
    def run(*args, **kwargs):
        token = _UNBOUND.set(True)
        try:
            return method(*args, **kwargs)
        finally:
            _UNBOUND.reset(token)
    return run


def check_tail_crcs(path, attrs: dict) -> dict:
    """The ``tail_crc32c`` attribute, checked to be ``{array: [chunk, entries, crc]}`` (empty if absent)."""
    tails = attrs.get(TAIL_CRCS) or {}

    def ok(v):
        return (isinstance(v, list) and len(v) == 3
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v))

    if not isinstance(tails, dict) or not all(ok(v) for v in tails.values()):
        raise StoreFormatError(f"{Path(path) / 'zarr.json'}: corrupt metadata: {TAIL_CRCS} is not "
                               "{array: [chunk, entries, crc]}")
    return tails


def _tail_crc(arr, length: int):
    """``[chunk, entries, crc]`` of the decoded entries ``c*C:length`` of the last chunk, or None if it is full."""
    import google_crc32c

    raw = getattr(arr, "_arr", arr)            # the zarr array itself: what the append just wrote
    C = int(raw.chunks[0])
    c, n = divmod(int(length), C)
    if n == 0:
        return None
    rows = np.ascontiguousarray(raw[c * C : c * C + n])
    return [c, n, int(google_crc32c.value(rows.reshape(-1).view(np.uint8)))]


def commit_bindings(loc, arrays: dict, lengths: dict, attrs: dict) -> dict:
    """The two binding attributes for a commit of ``lengths`` (array -> committed entries), to merge into it.

    ``loc``: the store's path or Remote; ``attrs``: the commit record so far (its full-chunk CRCs are
    kept, not re-read).
    """
    crcs = full_chunk_crcs(loc, arrays, lengths, attrs.get(CHUNK_CRCS) or {})
    tails = {}
    for name, length in lengths.items():
        t = _tail_crc(arrays[name], length)
        if t is not None:
            tails[name] = t
    return {CHUNK_CRCS: crcs, TAIL_CRCS: tails}


def bound_decoder(loc, name: str, strict: bool, crcs: dict, tails: dict):
    """A chunk decoder of array ``name`` holding its bindings, or None (a layout zarr must read).

    ``loc``: the store's local path, or its :class:`~streamrank.io._remote.Remote` (object storage:
    :class:`~streamrank.io._remote_chunks.RemoteChunkDecoder`, the same checks).
    """
    if isinstance(loc, (str, os.PathLike)):
        dec = ChunkFileDecoder.for_array(loc, name)
    else:
        from ._remote_chunks import RemoteChunkDecoder

        dec = RemoteChunkDecoder.for_remote(loc, name)
    if dec is not None:
        dec.strict = strict
        dec.expected = crcs.get(name)
        t = tails.get(name)
        dec.tail = tuple(t) if t is not None else None
    return dec


class BoundArray(CheckedArray):
    """A :class:`CheckedArray` whose row slices are decoded chunk by chunk with the bindings checked.

    ``a[i:j]`` (and ``a[i:j, :]``) decodes each chunk it touches whole with
    the array's :class:`ChunkFileDecoder` (what zarr does too: a chunk is
    decoded whole for any part of it) and copies the rows asked for; every
    other selection, and writes, are zarr's.
    """

    def __init__(self, arr, path, name, strict: bool, decoder: ChunkFileDecoder):
        super().__init__(arr, path, name, strict)
        self._decoder = decoder

    def __getattr__(self, attr):
        if attr == "_decoder":
            raise AttributeError(attr)
        return super().__getattr__(attr)

    def _rows(self, key):
        """``(start, stop)`` if ``key`` selects whole rows ``start:stop`` (step 1), else None."""
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if not isinstance(first, slice) or first.step not in (None, 1):
            return None
        if any(not (isinstance(k, slice) and k == slice(None)) for k in rest) or len(rest) >= self._arr.ndim:
            return None
        a, b, _ = first.indices(self._arr.shape[0])
        return (a, b) if b > a else None

    def __getitem__(self, key):
        rows = None if _UNBOUND.get() else self._rows(key)
        if rows is None:
            return super().__getitem__(key)
        a, b = rows
        dec = self._decoder
        C = dec.chunk_shape[0]
        out = np.empty((b - a,) + tuple(self._arr.shape[1:]), dtype=dec.dtype)
        whole = None
        for c in range(a // C, (b - 1) // C + 1):
            s, e = max(a, c * C), min(b, c * C + C)
            if s == c * C and e == c * C + C:
                dec.decode(c, out[s - a : e - a])
            else:
                if whole is None:
                    whole = np.empty(dec.chunk_shape, dtype=dec.dtype)
                dec.decode(c, whole)
                out[s - a : e - a] = whole[s - c * C : e - c * C]
        return out


def bound_array(arr, loc, name: str, strict: bool, crcs: dict, tails: dict, path=None) -> CheckedArray:
    """``arr`` wrapped so its reads check the bindings (:class:`BoundArray`) where the chunk decoder applies.

    ``loc``: the store's local path or Remote (where the chunks are); ``path``: the store as messages name it.
    """
    path = loc if path is None else path
    dec = bound_decoder(loc, name, strict, crcs, tails)
    if dec is None:
        return CheckedArray(arr, path, name, strict)
    return BoundArray(arr, path, name, strict, dec)


def rebind(decoders, crcs: dict, tails: dict) -> None:
    """After a commit: these decoders check the new commit's bindings (the old ones stay true, but weaker)."""
    for d in decoders:
        if d is not None:
            t = tails.get(d.name)
            d.expected, d.tail = crcs.get(d.name), (tuple(t) if t is not None else None)
