"""numba loops of :mod:`streamrank.kernels`: the elementwise map after the BLAS product.

Each function works in place on a float64 C-contiguous matrix ``K`` that holds
the dot products ``x·z`` and turns it into kernel values in one pass (numpy
would need five passes and temporaries over the block).  ``*_parallel`` are
the ``prange`` twins of the serial loops (same results bit for bit: every
entry is computed independently).
"""
from __future__ import annotations

import math

from ._numba import jit, jit_parallel, prange

__all__ = ["rbf_from_dot", "rbf_from_dot_parallel", "poly_from_dot", "poly_from_dot_parallel"]


@jit
def rbf_from_dot(K, nx, nz, gamma, same):
    """K[i, j] <- exp(-gamma * max(nx[i] + nz[j] - 2 K[i, j], 0)); exactly 1 on the diagonal if ``same``."""
    n, m = K.shape
    for i in range(n):
        a = nx[i]
        for j in range(m):
            d = a + nz[j] - 2.0 * K[i, j]
            if d < 0.0 or (same and i == j):
                d = 0.0
            K[i, j] = math.exp(-gamma * d)


@jit_parallel
def rbf_from_dot_parallel(K, nx, nz, gamma, same):
    n, m = K.shape
    for i in prange(n):
        a = nx[i]
        for j in range(m):
            d = a + nz[j] - 2.0 * K[i, j]
            if d < 0.0 or (same and i == j):
                d = 0.0
            K[i, j] = math.exp(-gamma * d)


@jit
def poly_from_dot(K, gamma, coef0, degree):
    """K[i, j] <- (gamma K[i, j] + coef0) ** degree (integer degree)."""
    n, m = K.shape
    for i in range(n):
        for j in range(m):
            K[i, j] = (gamma * K[i, j] + coef0) ** degree


@jit_parallel
def poly_from_dot_parallel(K, gamma, coef0, degree):
    n, m = K.shape
    for i in prange(n):
        for j in range(m):
            K[i, j] = (gamma * K[i, j] + coef0) ** degree
