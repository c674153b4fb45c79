"""Dense-or-CSR products behind :class:`~streamrank.rankrls._statistics.RankStatistics`.

Weighted Grams ``Aᵀ diag(d) A``, ``Aᵀ (d ∘ Y)``, per-group / per-label sums
(dense through :mod:`streamrank._laplacian_kernels`, CSR through an indicator
matrix), the SYRK accumulation ``acc += α AᵀA`` and the pair count
n(n − 1)/2 of a group of n rows.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _laplacian_kernels as _k

def _pair_count(n):
    n = np.asarray(n, dtype=np.int64)
    return n * (n - 1) // 2


def _syrk(alpha, A, acc):
    """acc += alpha AᵀA for a float64 A (rows, k), C- or Fortran-contiguous.

    numpy runs ``A.T @ A`` of one buffer as BLAS SYRK (half the flops of a
    GEMM) and releases the GIL meanwhile, so the prefetching reader thread
    (zarr decoding, which needs the GIL between its steps) keeps going;
    scipy's f2py ``dsyrk`` holds the GIL for the whole call, which serialised
    reading and accumulation (measured).  The O(k²) symmetric copy numpy
    makes is small next to the O(rows k²) product.
    """
    if A.shape[0] == 0:
        return
    AtA = A.T @ A
    if alpha != 1.0:
        AtA *= alpha
    acc += AtA


def _weighted_gram(A, d):
    """Aᵀ diag(d) A as a dense float64 (n, n) array; d >= 0."""
    if sp.issparse(A):
        return np.asarray((A.T @ A.multiply(d[:, None]).tocsr()).toarray(), dtype=np.float64)
    if A.shape[0] == 0:
        return np.zeros((A.shape[1], A.shape[1]))
    c = d[0]
    if np.all(d == c):
        return c * (A.T @ A)
    Z = A * np.sqrt(d)[:, None]
    return Z.T @ Z


def _weighted_xty(A, d, Y):
    """Aᵀ (d ∘ Y) as dense (n, v)."""
    DY = d[:, None] * Y
    if sp.issparse(A):
        return np.asarray(A.T @ DY, dtype=np.float64)
    return A.T @ DY


def _indicator(labels, n_labels):
    rows = labels.shape[0]
    return sp.csr_matrix((np.ones(rows), (labels, np.arange(rows))), shape=(n_labels, rows))


def _group_sums(Phi, gp):
    if sp.issparse(Phi):
        labels = np.repeat(np.arange(len(gp) - 1), np.diff(gp))
        return (_indicator(labels, len(gp) - 1) @ Phi).tocsr()
    return _k.group_sums(Phi, gp)


def _weighted_sums(Phi, ids, n_ids, w):
    """Σ_{i: ids_i = c} w_i Φ_i for every label c: (n_ids, n), dense float64 or CSR."""
    if sp.issparse(Phi):
        rows = Phi.shape[0]
        M = sp.csr_matrix((w, (ids, np.arange(rows))), shape=(n_ids, rows))
        return (M @ Phi).tocsr()
    return _k.id_sums(np.asarray(Phi, dtype=np.float64) * w[:, None], ids, n_ids)


def _id_sums(Phi, ids, n_ids):
    if sp.issparse(Phi):
        return (_indicator(ids, n_ids) @ Phi).tocsr()
    return _k.id_sums(Phi, ids, n_ids)


def _dense_row(S, g):
    if sp.issparse(S):
        return np.asarray(S[g].toarray(), dtype=np.float64).ravel()
    return np.array(S[g], dtype=np.float64)
