"""Numba kernels of the row pool that holds the sparse bilinear SGD ranker's W (no SGD step here).

W (n_rows query features x n_cols item features) is held row by row.  Row i
is a run of column indices ``pc[p : p + n]`` (int32, in insertion order) and
values ``pv[p : p + n]`` (float64) inside one pool; ``meta[i] = (p, n, cap,
stamp)`` gives its start, length, capacity and the sweep index of the
shrinkage last applied to the whole row.  A row that outgrows its capacity
moves to a segment of the next power of two: a segment released earlier
(free lists by size, :func:`_alloc`) or one at the end of the pool.  When the
end is reached the caller repacks the pool (``_table.SparseW``), so memory
is proportional to the entries stored, plus 32 bytes a row.

This module holds the pool's layout (the ``istate`` slots and ``meta``
columns), segment allocation (:func:`_alloc`, :func:`_release`,
:func:`_moves`), repacking and filling (:func:`repack`, :func:`set_rows`),
the shrinkage of whole rows (:func:`flush_rows`, the literal sweep
:func:`_sweep_rows`) and reading W out (:func:`stored_csr`,
:func:`rows_to_coo`).  The SGD steps that write into the rows are in
:mod:`streamrank.sgd._sparse_w_kernels`, which re-exports these names.
"""
from __future__ import annotations

import numpy as np

from streamrank._numba import jit

from ._sparse_row_kernels import soft as _soft

_u = np.uint64  # an index numba needs no wraparound code for (see _sparse_w_kernels._step_row)

__all__ = [
    "I_T", "I_K", "I_COUNT", "I_UPDATES", "I_ACTIVE", "I_TREFIT", "I_FLUSHED", "I_USED", "I_GARBAGE", "I_NEED",
    "I_NEED_LOG", "N_ISTATE", "M_START", "M_LEN", "M_CAP", "M_STAMP", "MIN_ROW_CAP", "N_CLASSES",
    "empty_free_lists", "row_capacity", "capacity_total", "flush_rows", "packed_size", "repack", "set_rows",
    "rows_to_coo", "stored_csr",
]

I_T, I_K, I_COUNT, I_UPDATES, I_ACTIVE, I_TREFIT, I_FLUSHED, I_USED, I_GARBAGE, I_NEED, I_NEED_LOG = range(11)
N_ISTATE = 11
M_START, M_LEN, M_CAP, M_STAMP = 0, 1, 2, 3
MIN_ROW_CAP = 4
N_CLASSES = 64  # segment sizes 2**c; ``free`` holds N_CLASSES list heads, then their lengths


@jit
def row_capacity(n):
    """Smallest power of two >= max(n, MIN_ROW_CAP): the capacity a row of n entries moves into."""
    c = MIN_ROW_CAP
    while c < n:
        c *= 2
    return c


@jit
def capacity_total(lengths):
    """Sum of ``row_capacity(n)`` over the nonzero ``n`` in ``lengths`` (the pool :func:`set_rows` fills)."""
    u = 0
    for n in lengths:
        if n > 0:
            u += row_capacity(n)
    return u


@jit
def _shrink_row(meta, pc, pv, i, sh, K):
    """Soft-threshold every entry of row i by ``sh`` in place, drop the zeros, stamp K; returns entries removed."""
    p = meta[i, M_START]
    n = meta[i, M_LEN]
    w = p
    for k in range(p, p + n):
        v = _soft(pv[_u(k)], sh)
        if v != 0.0:
            pc[_u(w)] = pc[_u(k)]
            pv[_u(w)] = v
            w += 1
    meta[i, M_LEN] = w - p
    meta[i, M_STAMP] = K
    return p + n - w


@jit
def flush_rows(meta, pc, pv, S, K):
    """Apply every pending shrinkage (exactly) and drop the zeros; returns entries removed."""
    SK = S[K]
    removed = 0
    for i in range(meta.shape[0]):
        st = meta[i, M_STAMP]
        if st != K:
            removed += _shrink_row(meta, pc, pv, i, SK - S[st], K)
    return removed


@jit
def _sweep_rows(meta, pc, pv, thr, K):
    """The literal sweep of Algorithm 1 step 4: ``w <- soft(w, thr)`` for every entry."""
    removed = 0
    for i in range(meta.shape[0]):
        removed += _shrink_row(meta, pc, pv, i, thr, K)
    return removed


@jit
def _packed_cap(n, tight):
    if n == 0:
        return 0
    return n if tight else row_capacity(n)


@jit
def packed_size(meta, tight):
    """Pool entries :func:`repack` needs (``tight``: exactly the stored entries)."""
    u = 0
    for i in range(meta.shape[0]):
        u += _packed_cap(meta[i, M_LEN], tight)
    return u


@jit
def repack(meta, pc, pv, new_pc, new_pv, tight):
    """Copy every row into the fresh pool (new_pc, new_pv), in row order; returns the pool used.

    A row of n entries gets the capacity ``row_capacity(n)`` (a power of
    two), or exactly n when ``tight``; an
    empty row gets none.  :func:`packed_size` says how much that is.
    """
    u = 0
    for i in range(meta.shape[0]):
        p = meta[i, M_START]
        n = meta[i, M_LEN]
        cap = _packed_cap(n, tight)
        for s in range(n):
            new_pc[u + s] = pc[p + s]
            new_pv[u + s] = pv[p + s]
        meta[i, M_START] = u
        meta[i, M_CAP] = cap
        u += cap
    return u


@jit
def set_rows(meta, pc, pv, indptr, indices, data, stamps):
    """Fill an empty pool from CSR rows (sorted, no explicit zeros); row i gets stamp ``stamps[i]``."""
    u = 0
    for i in range(meta.shape[0]):
        n = indptr[i + 1] - indptr[i]
        cap = row_capacity(n) if n > 0 else 0
        for s in range(n):
            pc[u + s] = indices[indptr[i] + s]
            pv[u + s] = data[indptr[i] + s]
        meta[i, M_START] = u
        meta[i, M_LEN] = n
        meta[i, M_CAP] = cap
        meta[i, M_STAMP] = stamps[i]
        u += cap
    return u


def empty_free_lists() -> np.ndarray:
    """The ``free`` array of :func:`_alloc` with every list empty."""
    free = np.zeros(2 * N_CLASSES, dtype=np.int64)
    free[:N_CLASSES] = -1
    return free


@jit
def _size_class(cap):
    c = 0
    while (1 << c) < cap:
        c += 1
    return c


@jit
def _alloc(pv, free, istate, cap):
    """Start of a free segment of ``cap`` (a power of two) entries: a released one, else the pool's end.

    Released segments of each size are chained through their first value
    slot (``pv.view(int64)[start]`` is the next one, -1 ends the list);
    ``free[c]`` is the head of the list of segments of ``2**c`` entries and
    ``free[N_CLASSES + c]`` its length.
    """
    c = _size_class(cap)
    seg = free[c]
    if seg >= 0:
        free[c] = pv.view(np.int64)[seg]
        free[N_CLASSES + c] -= 1
        istate[I_GARBAGE] -= cap
        return seg
    seg = istate[I_USED]
    istate[I_USED] += cap
    return seg


@jit
def _release(pv, free, istate, start, cap):
    """Give the segment back: chained for reuse when ``cap`` is a power of two (else left as garbage)."""
    istate[I_GARBAGE] += cap
    if cap >= MIN_ROW_CAP and (cap & (cap - 1)) == 0:
        c = _size_class(cap)
        pv.view(np.int64)[start] = free[c]
        free[c] = start
        free[N_CLASSES + c] += 1


@jit
def _moves(n, cap, old_cap):
    """Whether a row about to hold up to ``n`` entries leaves its segment of ``old_cap``.

    It moves into a segment of ``cap = row_capacity(n)`` when it does not fit,
    and also when it would use a quarter or less of a segment at least 4x too
    big (rows shrink as their entries reach zero; the big segment goes back to
    the free lists).  Growth doubles, shrinking needs 4x: no row moves back
    and forth between two sizes.
    """
    return n > old_cap or 4 * cap <= old_cap


@jit
def stored_csr(meta, pc, pv):
    """(indptr, indices, values) of the entries as stored (pending shrinkage not applied); read-only."""
    n_rows = meta.shape[0]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    for i in range(n_rows):
        indptr[i + 1] = indptr[i] + meta[i, M_LEN]
    indices = np.empty(indptr[n_rows], dtype=np.int64)
    vals = np.empty(indptr[n_rows], dtype=np.float64)
    for i in range(n_rows):
        p = meta[i, M_START]
        for s in range(meta[i, M_LEN]):
            indices[indptr[i] + s] = pc[p + s]
            vals[indptr[i] + s] = pv[p + s]
    return indptr, indices, vals


@jit
def rows_to_coo(meta, pc, pv, S, K):
    """(rows, cols, values) of the nonzero up-to-date entries, row by row (columns in stored order)."""
    SK = S[K]
    n = 0
    for i in range(meta.shape[0]):
        n += meta[i, M_LEN]
    rows = np.empty(n, dtype=np.int64)
    cols = np.empty(n, dtype=np.int64)
    data = np.empty(n, dtype=np.float64)
    n = 0
    for i in range(meta.shape[0]):
        p = meta[i, M_START]
        st = meta[i, M_STAMP]
        sh = SK - S[st] if st != K else 0.0
        for s in range(p, p + meta[i, M_LEN]):
            v = pv[s]
            if sh > 0.0:
                v = _soft(v, sh)
            if v != 0.0:
                rows[n] = i
                cols[n] = pc[s]
                data[n] = v
                n += 1
    return rows[:n], cols[:n], data[:n]
