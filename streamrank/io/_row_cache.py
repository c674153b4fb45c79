"""The byte-bounded row cache behind :meth:`TupleSource.batches` and :meth:`TupleSource.take` of a store.

A tuple batch needs the rows of ``Q`` and ``D`` its tuples name, scattered
over the store.  :class:`RowCache` keeps decoded pieces of consecutive rows
(an LRU bounded in bytes), so a pass over a store reads each piece about once
while memory stays below ``cache_bytes`` whatever the number of stored vectors.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import scipy.sparse as sp


__all__ = ["RowCache"]

_PIECE_ROWS = 1 << 16   # most rows in one cached row piece
_PIECES_PER_BUDGET = 4   # a piece aims at <= cache_bytes / 4 so the cache holds several


def _check_cache_bytes(cache_bytes):
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0:
        raise ValueError(f"cache_bytes must be an integer >= 0 (a byte budget), got {cache_bytes!r}")
    return int(cache_bytes)


class RowCache:
    """LRU cache of decoded CSR row pieces of a store's ``Q`` and ``D``, bounded in bytes.

    A piece is ``rows_per_piece[side]`` consecutive rows ``r0:r1`` (aligned:
    ``r0`` is a multiple of it): ``indptr[r0:r1+1] - indptr[r0]`` (int64) and
    ``indices`` / ``data`` of entries ``indptr[r0]:indptr[r1]``.  Its size is
    ``8 (r1 - r0 + 1) + 8 nnz`` bytes.  Inserting a piece evicts the least
    recently used ones until ``nbytes + size <= budget``; a piece larger than
    the budget is used for the one request and not kept.  So ``nbytes`` (and
    its high-water mark ``peak_nbytes``) never exceed ``budget``.

    ``cache[side]`` is a reader: ``reader[rows]`` (int array, repeats allowed)
    gives the same CSR matrix as ``M[rows]`` on the whole matrix ``M``.
    """

    def __init__(self, budget: int, read_piece, n_rows: dict, n_nnz: dict, n_features: dict):
        self.budget = int(budget)
        self._read_piece = read_piece           # (side, r0, r1) -> (indptr, indices, data)
        self._n_rows, self._n_features = dict(n_rows), dict(n_features)
        self._lru = OrderedDict()
        self.nbytes = self.peak_nbytes = 0
        self.hits = self.misses = self.evictions = 0
        self.rows_per_piece = {}
        for side, rows in self._n_rows.items():
            per_row = 8.0 + 8.0 * n_nnz[side] / max(rows, 1)
            target = self.budget / _PIECES_PER_BUDGET
            self.rows_per_piece[side] = int(max(1, min(_PIECE_ROWS, target // per_row)))

    def info(self) -> dict:
        """Counters: bytes held now and at most, budget, hits, misses, evictions, pieces held."""
        return {"nbytes": self.nbytes, "peak_nbytes": self.peak_nbytes, "budget": self.budget,
                "hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                "pieces": len(self._lru)}

    def clear(self):
        self._lru.clear()
        self.nbytes = 0

    def _piece(self, side, k):
        key = (side, k)
        got = self._lru.get(key)
        if got is not None:
            self._lru.move_to_end(key)
            self.hits += 1
            return got
        self.misses += 1
        p = self.rows_per_piece[side]
        r0, r1 = k * p, min((k + 1) * p, self._n_rows[side])
        piece = self._read_piece(side, r0, r1)
        size = sum(a.nbytes for a in piece)
        if size <= self.budget:
            while self._lru and self.nbytes + size > self.budget:
                _, old = self._lru.popitem(last=False)
                self.nbytes -= sum(a.nbytes for a in old)
                self.evictions += 1
            self._lru[key] = piece
            self.nbytes += size
            self.peak_nbytes = max(self.peak_nbytes, self.nbytes)
        return piece

    def rows(self, side, rows):
        """CSR of ``rows`` of ``side`` ("Q" or "D"), equal to ``M[rows]`` on the whole matrix."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        n, nf = self._n_rows[side], self._n_features[side]
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise IndexError(f"{side} row index out of range 0:{n}")
        uniq, inverse = np.unique(rows, return_inverse=True)
        p = self.rows_per_piece[side]
        keys = uniq // p
        bounds = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True]) if uniq.size else [0]
        segs = list(zip(bounds[:-1], bounds[1:]))
        # cached pieces first: a scan over more pieces than the cache holds then
        # evicts only pieces this request does not need (no LRU thrash)
        order = sorted(range(len(segs)), key=lambda j: (side, int(keys[segs[j][0]])) not in self._lru)
        lens, inds, dats = [None] * len(segs), [None] * len(segs), [None] * len(segs)
        for j in order:
            a, b = segs[j]
            k = int(keys[a])
            ip, ind, dat = self._piece(side, k)
            loc = uniq[a:b] - k * p
            st, ln = ip[loc], ip[loc + 1] - ip[loc]
            tot = int(ln.sum())
            gather = np.repeat(st - (np.cumsum(ln) - ln), ln) + np.arange(tot, dtype=np.int64)
            lens[j], inds[j], dats[j] = ln, ind[gather], dat[gather]
        ln = np.concatenate(lens) if lens else np.zeros(0, np.int64)
        indptr = np.r_[np.int64(0), np.cumsum(ln, dtype=np.int64)]
        ind = np.concatenate(inds) if inds else np.zeros(0, np.int32)
        dat = np.concatenate(dats) if dats else np.zeros(0, np.float32)
        sub = sp.csr_matrix((dat, ind, indptr), shape=(len(uniq), nf))
        return sub[inverse.reshape(-1)]

    def __getitem__(self, side):
        return _RowReader(self, side)


class _RowReader:
    """``reader[rows]`` -> ``cache.rows(side, rows)``: what ``tuple_store._make_batch`` indexes."""

    __slots__ = ("cache", "side")

    def __init__(self, cache, side):
        self.cache, self.side = cache, side

    def __getitem__(self, rows):
        return self.cache.rows(self.side, rows)
