"""Numba kernels of :mod:`streamrank.rankrls._statistics`: one pass that prepares a block for SYRK.

The dense accumulation of ``G = ΦᵀLΦ`` (DESIGN §3.2) is one BLAS rank-k
update of the scaled block ``A = [sx ∘ Φ̃ | sy ∘ Ỹ]`` (float64).  Building A
and the per-group sums takes one pass here (the rows of a group are read
twice while they are in cache), reading Φ in its stored dtype (float32 or
float64) and writing into a preallocated, reused float64 buffer — no
per-block temporaries:

    T[g] = Σ_{i in g} [Φ[i], Y[i]]                        (unscaled group sums)
    Φ̃[i] = Φ[i] - T[g, :n] / n_g,  Ỹ[i] = Y[i] - T[g, n:] / n_g   if center[g]
    Φ̃[i] = Φ[i],                   Ỹ[i] = Y[i]                    otherwise
    A[i, :n] = sx[i] Φ̃[i],   A[i, n:] = sy[i] Ỹ[i]

With ties included, the group Laplacian is L_g = s_g (n_g I - 11ᵀ)
= s_g n_g C_g with C_g = I - 11ᵀ/n_g the centring projector (C_g² = C_g), so
Φ_gᵀ L_g Φ_g = s_g n_g Φ̃_gᵀ Φ̃_g: centring a whole group and scaling its rows
by √(s_g n_g) turns its whole contribution into one SYRK term, no low-rank
correction (and no cancellation between a diagonal and a low-rank part).

Jitted functions of arrays and scalars only; plain-numpy references in
``tests/rankrls/test_statistics_kernels.py``.
"""
from __future__ import annotations

from .._numba import jit

__all__ = ["fill_scaled", "scale_in_place_f"]


@jit
def fill_scaled(Phi, Y, sx, sy, group_ptr, center, A, T):
    """A[:, :n] = sx ∘ Φ̃, A[:, n:] = sy ∘ Ỹ (Φ̃, Ỹ centred per group where ``center``) and T = group sums.

    Φ (rows, n) float32/float64, Y (rows, v), sx/sy (rows,), group_ptr
    (groups + 1,), center (groups,) bool; A (≥ rows, n + v) float64 and T
    (groups, n + v) float64 are written (T is overwritten with the unscaled,
    uncentred sums of [Φ, Y]).  Rows outside ``group_ptr`` are untouched.
    Φ may be ``A[:, :n]`` itself (row-major, any row stride): every entry is
    read before it is written, and a group's sums are complete before its
    rows are, so the block is centred and scaled in place.
    """
    n = Phi.shape[1]
    v = Y.shape[1]
    n_groups = group_ptr.shape[0] - 1
    for g in range(n_groups):
        a0 = group_ptr[g]
        a1 = group_ptr[g + 1]
        for j in range(n + v):
            T[g, j] = 0.0
        for i in range(a0, a1):
            for j in range(n):
                T[g, j] += float(Phi[i, j])
            for k in range(v):
                T[g, n + k] += float(Y[i, k])
        inv = 1.0 / (a1 - a0) if (center[g] and a1 > a0) else 0.0
        for i in range(a0, a1):
            a = sx[i]
            for j in range(n):
                A[i, j] = a * (float(Phi[i, j]) - T[g, j] * inv)
            b = sy[i]
            for k in range(v):
                A[i, n + k] = b * (float(Y[i, k]) - T[g, n + k] * inv)


@jit
def scale_in_place_f(A, n, Y, sx, sy, group_ptr, center, T):
    """Like :func:`fill_scaled` with Φ already in ``A[:, :n]`` of a Fortran-ordered A (centred and scaled in
    place, Ỹ written to A[:, n:]); column by column, so every inner loop runs over contiguous rows."""
    v = Y.shape[1]
    n_groups = group_ptr.shape[0] - 1
    for j in range(n):
        for g in range(n_groups):
            a0 = group_ptr[g]
            a1 = group_ptr[g + 1]
            t = 0.0
            for i in range(a0, a1):
                t += A[i, j]
            T[g, j] = t
            m = t / (a1 - a0) if (center[g] and a1 > a0) else 0.0
            for i in range(a0, a1):
                A[i, j] = sx[i] * (A[i, j] - m)
    for k in range(v):
        for g in range(n_groups):
            a0 = group_ptr[g]
            a1 = group_ptr[g + 1]
            t = 0.0
            for i in range(a0, a1):
                t += float(Y[i, k])
            T[g, n + k] = t
            m = t / (a1 - a0) if (center[g] and a1 > a0) else 0.0
            for i in range(a0, a1):
                A[i, n + k] = sy[i] * (float(Y[i, k]) - m)

