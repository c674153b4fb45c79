"""Numba kernels of :mod:`streamrank.rankrls._statistics`: one pass that prepares a block for SYRK.

The dense accumulation of ``G = ΦᵀLΦ`` (DESIGN §3.2) is one BLAS rank-k
update of the scaled block ``A = [sx ∘ Φ | sy ∘ Y]`` (float64).  Building A
and the per-group sums that the low-rank part of L needs takes one pass here,
reading Φ in its stored dtype (float32 or float64) and writing into a
preallocated, reused float64 buffer — no per-block temporaries:

    A[i, :n] = sx[i] Φ[i],   A[i, n:] = sy[i] Y[i],   T[g] = Σ_{i in g} [Φ[i], Y[i]]   (unscaled)

Jitted functions of arrays and scalars only; plain-numpy twins in
``tests/rankrls/test_statistics_kernels.py``.
"""
from __future__ import annotations

from .._numba import jit

__all__ = ["fill_scaled", "scale_in_place", "group_sums_into"]


@jit
def fill_scaled(Phi, Y, sx, sy, group_ptr, A, T):
    """A[:, :n] = sx ∘ Φ, A[:, n:] = sy ∘ Y (row scalings) and T = unscaled group sums of [Φ, Y].

    Φ (rows, n) float32/float64, Y (rows, v), sx/sy (rows,), group_ptr
    (groups + 1,); A (≥ rows, n + v) float64 and T (groups, n + v) float64
    are written (T is overwritten).  Rows outside ``group_ptr`` are untouched.
    """
    n = Phi.shape[1]
    v = Y.shape[1]
    n_groups = group_ptr.shape[0] - 1
    for g in range(n_groups):
        for j in range(n + v):
            T[g, j] = 0.0
        for i in range(group_ptr[g], group_ptr[g + 1]):
            a = sx[i]
            for j in range(n):
                x = float(Phi[i, j])
                T[g, j] += x
                A[i, j] = a * x
            b = sy[i]
            for k in range(v):
                yk = float(Y[i, k])
                T[g, n + k] += yk
                A[i, n + k] = b * yk


@jit
def scale_in_place(A, n, Y, sx, sy, group_ptr, T):
    """Like :func:`fill_scaled` with Φ already in ``A[:, :n]`` (scaled in place; Y written to A[:, n:])."""
    v = Y.shape[1]
    n_groups = group_ptr.shape[0] - 1
    for g in range(n_groups):
        for j in range(n + v):
            T[g, j] = 0.0
        for i in range(group_ptr[g], group_ptr[g + 1]):
            a = sx[i]
            for j in range(n):
                x = A[i, j]
                T[g, j] += x
                A[i, j] = a * x
            b = sy[i]
            for k in range(v):
                yk = float(Y[i, k])
                T[g, n + k] += yk
                A[i, n + k] = b * yk


@jit
def group_sums_into(A, n, Y, group_ptr, T):
    """Constant row weight: Y written to A[:, n:], T = group sums of [A[:, :n], Y]; A[:, :n] unchanged."""
    v = Y.shape[1]
    n_groups = group_ptr.shape[0] - 1
    for g in range(n_groups):
        for j in range(n + v):
            T[g, j] = 0.0
        for i in range(group_ptr[g], group_ptr[g + 1]):
            for j in range(n):
                T[g, j] += A[i, j]
            for k in range(v):
                yk = float(Y[i, k])
                T[g, n + k] += yk
                A[i, n + k] = yk
