"""Row ranges of a row-chunked zarr array, each chunk decoded once per sequential pass.

zarr decodes a whole chunk to return any part of it.  A block that ends
inside a chunk and the next block that starts there would decode that chunk
twice (blocks are planned on group boundaries, chunks on fixed row counts),
and small blocks — the kernel learners' few thousand rows against chunks of
about 4 MiB — decode every chunk once per block that touches it.
:class:`RowChunkReader` reads whole chunks and keeps the last ``keep``
decoded ones, so a sequential pass decodes every chunk exactly once,
whatever the block cutting.

Committed rows of a store never change (appends only add rows, see
:mod:`streamrank.io.group_store`), so a cached chunk stays valid for the
rows it holds; a chunk cached while it was partly filled is read again when
rows beyond its cached end are asked for.  Returned arrays are fresh copies
(as zarr's own reads are): callers may write into them.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

__all__ = ["RowChunkReader"]


class RowChunkReader:
    """``read(r0, r1, n_rows)`` = ``arr[r0:r1]``, decoding whole chunks and keeping the last ``keep``.

    Parameters
    ----------
    arr : zarr array (or :class:`~streamrank.io.schema.CheckedArray`), chunked along rows
    keep : int
        Decoded chunks kept (memory: ``keep`` chunks; 2 covers a block that
        straddles a chunk boundary).
    decoder : :class:`~streamrank.io._chunk_files.ChunkFileDecoder`, optional
        Decodes whole chunks straight from their files (about 3x less CPU
        than zarr's read path); None: zarr reads them.
    check : callable ``check(first_row, rows)``, optional
        Called on every run of committed rows as soon as it is decoded,
        while it is still in the CPU cache: on the chunk decoder's path the
        decoder runs it inside its decode call on the committed rows of each
        chunk it decodes (so every chunk is checked once, whole, whatever the
        block cutting); raises if the rows are not what the store may hold
        (see :mod:`streamrank.io._read_checks`).  Rows served from the cache
        were checked when they were decoded.
    """

    def __init__(self, arr, keep: int = 2, decoder=None, check=None):
        self._arr = arr
        self._decoder = decoder
        self._check = check
        if decoder is not None and int(decoder.chunk_shape[0]) != int(arr.chunks[0]):
            raise ValueError("the decoder's chunk shape differs from the array's")
        if decoder is not None:
            decoder.check = check          # run inside the decode call (the decoder is this reader's own)
        self._rows_per_chunk = int(arr.chunks[0])
        self._keep = max(1, int(keep))
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def _cached(self, c: int, stop: int):
        """Chunk c from the cache if it holds rows up to ``stop``, else None."""
        with self._lock:
            hit = self._cache.get(c)
            if hit is not None and c * self._rows_per_chunk + hit.shape[0] >= stop:
                self._cache.move_to_end(c)
                return hit
        return None

    def _keep_chunk(self, c: int, data: np.ndarray):
        with self._lock:
            self._cache[c] = data
            self._cache.move_to_end(c)
            while len(self._cache) > self._keep:
                self._cache.popitem(last=False)

    def _read_into(self, a: int, b: int, out: np.ndarray, n_rows: int):
        """``out[:] = arr[a:b]``; decoded straight into ``out`` (the chunk decoder, else zarr's ``out=``)."""
        if b <= a:
            return
        if self._decoder is not None:
            C = self._rows_per_chunk
            for c in range(a // C, (b - 1) // C + 1):
                s, e = max(a, c * C), min(b, c * C + C)
                valid = min(C, n_rows - c * C)        # committed rows of chunk c (checked by the decoder)
                if s == c * C and e == c * C + C and out[s - a : e - a].flags.c_contiguous:
                    self._decoder.decode(c, out[s - a : e - a], valid)
                else:                      # part of a chunk: decode it whole, copy the rows asked for
                    whole = np.empty(self._decoder.chunk_shape, dtype=self._decoder.dtype)
                    self._decoder.decode(c, whole, valid)
                    out[s - a : e - a] = whole[s - c * C : e - c * C]
            return
        read_into = getattr(self._arr, "read_into", None)
        if read_into is not None:
            read_into(a, b, out)
        else:
            out[...] = self._arr[a:b]
        if self._check is not None:
            self._check(a, out)

    def read(self, r0: int, r1: int, n_rows: int) -> np.ndarray:
        """Rows ``[r0, r1)`` as a new array; ``n_rows`` is the committed length (chunks are cut there).

        A chunk in the cache is copied from it; the chunks that lie inside
        ``[r0, r1)`` (or that it ends) are decoded straight into the result
        (by the chunk decoder, or by one zarr call, which decodes them
        concurrently); a last chunk that the range ends inside is decoded
        whole into the cache, for the next block.  Peak memory: the result
        plus ``keep`` chunks.
        """
        r0, r1, n_rows = int(r0), int(r1), int(n_rows)
        if not 0 <= r0 <= r1 <= n_rows:
            raise IndexError(f"rows {r0}:{r1} outside the {n_rows} committed rows")
        arr = self._arr
        out = np.empty((r1 - r0,) + tuple(arr.shape[1:]), dtype=arr.dtype)
        if r1 == r0:
            return out
        C = self._rows_per_chunk
        first, last = r0 // C, (r1 - 1) // C
        prefetch = getattr(self._decoder, "prefetch", None)
        if prefetch is not None:                  # a remote store: request the block's chunks all at once
            prefetch([c for c in range(first, last + 1) if self._cached(c, min(c * C + C, n_rows)) is None])
        lo = r0                                   # rows [lo, hi) come straight from zarr
        hit = self._cached(first, min(first * C + C, n_rows))
        if hit is not None:
            e = min(r1, first * C + C)
            out[: e - r0] = hit[r0 - first * C : e - first * C]
            lo = e
        hi = r1
        end_last = min(last * C + C, n_rows)
        if lo < r1 < end_last:                    # the range ends inside chunk `last`: keep it for the next block
            tail = self._cached(last, end_last)
            if tail is None:
                if self._decoder is not None:          # the file holds the whole chunk: decode it in place
                    tail = np.empty(self._decoder.chunk_shape, dtype=self._decoder.dtype)
                    self._decoder.decode(last, tail, end_last - last * C)
                    tail = tail[: end_last - last * C]
                else:
                    tail = np.empty((end_last - last * C,) + tuple(arr.shape[1:]), dtype=arr.dtype)
                    self._read_into(last * C, end_last, tail, n_rows)
                self._keep_chunk(last, tail)
            s = max(lo, last * C)
            out[s - r0 : r1 - r0] = tail[s - last * C : r1 - last * C]
            hi = s
        self._read_into(lo, hi, out[lo - r0 : hi - r0], n_rows)
        return out

    def clear(self):
        with self._lock:
            self._cache.clear()
