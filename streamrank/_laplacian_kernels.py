"""Numba kernels of the group Laplacian (DESIGN §3.1).

Jitted functions of arrays and scalars only.  Every kernel accepts float32 or
float64 (read-only included) input and writes float64; CSR enters as
``(indptr, indices, data)``.  Plain-numpy twins live in
``tests/rankrls/test_laplacian_kernels.py``.
"""
from __future__ import annotations

import numpy as np

from ._numba import jit

__all__ = [
    "group_sums",
    "group_sums_csr",
    "id_sums",
    "laplacian_groups",
    "laplacian_classes",
]


@jit
def group_sums(U, group_ptr):
    """Per-group column sums of dense ``U`` (rows, k): returns (groups, k) float64.

    Empty groups give zero rows.
    """
    n_groups = group_ptr.shape[0] - 1
    k = U.shape[1]
    out = np.zeros((n_groups, k), dtype=np.float64)
    for g in range(n_groups):
        for i in range(group_ptr[g], group_ptr[g + 1]):
            for j in range(k):
                out[g, j] += U[i, j]
    return out


@jit
def group_sums_csr(indptr, indices, data, group_ptr, n_features):
    """Per-group feature sums of a CSR matrix: returns (groups, n_features) float64."""
    n_groups = group_ptr.shape[0] - 1
    out = np.zeros((n_groups, n_features), dtype=np.float64)
    for g in range(n_groups):
        for i in range(group_ptr[g], group_ptr[g + 1]):
            for p in range(indptr[i], indptr[i + 1]):
                out[g, indices[p]] += data[p]
    return out


@jit
def id_sums(U, ids, n_ids):
    """Sums of the rows of ``U`` (rows, k) by integer label ``ids`` (rows,) in [0, n_ids)."""
    k = U.shape[1]
    out = np.zeros((n_ids, k), dtype=np.float64)
    for i in range(U.shape[0]):
        c = ids[i]
        for j in range(k):
            out[c, j] += U[i, j]
    return out


@jit
def laplacian_groups(U, group_ptr, scale):
    """``L U`` with ``L_g = scale[g] (n_g I - 1 1ᵀ)`` per group, O(rows · k).

    ``out_i = scale[g] (n_g U_i - Σ_{j in g} U_j)``.
    """
    n_groups = group_ptr.shape[0] - 1
    rows, k = U.shape
    out = np.empty((rows, k), dtype=np.float64)
    tot = np.empty(k, dtype=np.float64)
    for g in range(n_groups):
        a = group_ptr[g]
        b = group_ptr[g + 1]
        n = b - a
        s = scale[g]
        for j in range(k):
            tot[j] = 0.0
        for i in range(a, b):
            for j in range(k):
                tot[j] += U[i, j]
        for i in range(a, b):
            for j in range(k):
                out[i, j] = s * (n * U[i, j] - tot[j])
    return out


@jit
def laplacian_classes(U, class_id, n_classes, class_scale, out):
    """Subtract the tie-class Laplacians in place: ``out -= Σ_c s_c (n_c I_c - 1_c 1_cᵀ) U``.

    ``class_id`` (rows,) labels every row with its tie class in [0, n_classes);
    ``class_scale`` (n_classes,) is the weight of the class's group.  Rows of a
    one-row class are untouched (their correction is zero).
    """
    rows, k = U.shape
    sums = np.zeros((n_classes, k), dtype=np.float64)
    counts = np.zeros(n_classes, dtype=np.int64)
    for i in range(rows):
        c = class_id[i]
        counts[c] += 1
        for j in range(k):
            sums[c, j] += U[i, j]
    for i in range(rows):
        c = class_id[i]
        s = class_scale[c]
        n = counts[c]
        for j in range(k):
            out[i, j] -= s * (n * U[i, j] - sums[c, j])
    return out
