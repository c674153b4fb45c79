"""numba loops of :mod:`streamrank.kernels`: the elementwise map after the BLAS product.

Each function works in place on a float64 C-contiguous matrix ``K`` that holds
the dot products ``x·z``, in one pass (numpy would need five passes over the
block).  For the Gaussian kernel the loop writes the exponent
``−γ max(‖x‖² + ‖z‖² − 2x·z, 0)`` and the caller applies ``numpy.exp`` in
place: numpy's vectorised exp is several times faster than a scalar
``math.exp`` in the loop.  ``*_parallel`` are the ``prange`` twins of the
serial loops (same results bit for bit: every entry is computed independently).
"""
from __future__ import annotations

from ._numba import jit, jit_parallel, prange

__all__ = [
    "rbf_exponent_from_dot", "rbf_exponent_from_dot_parallel", "poly_from_dot", "poly_from_dot_parallel",
    "rbf_exponent_rows", "poly_rows",
]


@jit
def rbf_exponent_from_dot(K, nx, nz, gamma, same):
    """K[i, j] <- -gamma * max(nx[i] + nz[j] - 2 K[i, j], 0); exactly 0 on the diagonal if ``same``."""
    n, m = K.shape
    for i in range(n):
        a = nx[i]
        for j in range(m):
            d = a + nz[j] - 2.0 * K[i, j]
            if d < 0.0 or (same and i == j):
                d = 0.0
            K[i, j] = -gamma * d


@jit_parallel
def rbf_exponent_from_dot_parallel(K, nx, nz, gamma, same):
    n, m = K.shape
    for i in prange(n):
        a = nx[i]
        for j in range(m):
            d = a + nz[j] - 2.0 * K[i, j]
            if d < 0.0 or (same and i == j):
                d = 0.0
            K[i, j] = -gamma * d


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


@jit
def rbf_exponent_rows(A, r0, r1, m, nx, nz, gamma):
    """:func:`rbf_exponent_from_dot` on the block ``A[r0:r1, :m]`` of a C-contiguous A, in place.

    The same map (never the diagonal rule: X and Z differ), with A passed whole so
    that the compiler knows its rows are contiguous and vectorises the inner loop
    (a strided view of the block would not be)."""
    for i in range(r0, r1):
        a = nx[i - r0]
        for j in range(m):
            d = a + nz[j] - 2.0 * A[i, j]
            if d < 0.0:
                d = 0.0
            A[i, j] = -gamma * d


@jit
def poly_rows(A, r0, r1, m, gamma, coef0, degree):
    """:func:`poly_from_dot` on the block ``A[r0:r1, :m]`` of a C-contiguous A, in place."""
    for i in range(r0, r1):
        for j in range(m):
            A[i, j] = (gamma * A[i, j] + coef0) ** degree
