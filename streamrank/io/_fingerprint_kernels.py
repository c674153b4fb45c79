"""Row fingerprints and zero counts of one block in one pass (numba), for :mod:`streamrank.io.fingerprints`.

``dense_fingerprints(X, Xu, salt, zeros, h)``: X a C-contiguous float32 (rows, n) block, Xu the same
memory viewed as uint32, ``salt`` n uint64 column salts; adds the zeros of each column to ``zeros`` and
writes ``h[i] = Σ_{j: x_ij ≠ 0} f(bits(x_ij) ^ salt_j)`` with ``f(z) = m ^ (m >> 32)``, ``m = z · C``
(wrapping uint64 arithmetic).  ``csr_fingerprints(indptr, indices, data, du, salt, zeros, h)`` is the
same over a CSR block's stored entries (explicit zeros skipped, implicit ones counted), so a row has
one fingerprint whatever its storage.  The per-entry function is cheap (one multiply) and the sum is
order-free; :func:`streamrank.io.fingerprints.row_fingerprints` mixes each row's sum once more with its
label.
"""
from __future__ import annotations

import numpy as np

from .._numba import jit

__all__ = ["dense_fingerprints", "csr_fingerprints"]

_C = np.uint64(0x9E3779B97F4A7C15)
_S = np.uint64(32)


@jit
def dense_fingerprints(X, Xu, salt, zeros, h):
    rows, n = X.shape
    for i in range(rows):
        acc = np.uint64(0)
        for j in range(n):
            if X[i, j] == 0:
                zeros[j] += 1
            else:
                m = (np.uint64(Xu[i, j]) ^ salt[j]) * _C
                acc += m ^ (m >> _S)
        h[i] = acc


@jit
def csr_fingerprints(indptr, indices, data, du, salt, zeros, h):
    rows = indptr.shape[0] - 1
    n = zeros.shape[0]
    nnz = np.zeros(n, dtype=np.int64)
    for i in range(rows):
        acc = np.uint64(0)
        for p in range(indptr[i], indptr[i + 1]):
            if data[p] != 0:
                j = indices[p]
                nnz[j] += 1
                m = (np.uint64(du[p]) ^ salt[j]) * _C
                acc += m ^ (m >> _S)
        h[i] = acc
    for j in range(n):
        zeros[j] += rows - nnz[j]
