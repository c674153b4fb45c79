"""Numba kernels shared by the SGD rankers for one sparse pair: the difference row and the soft threshold.

Both learners step on ``δ = x⁺ − x⁻`` of sorted CSR rows and shrink with the
soft threshold of Chen et al. 2010 eq. (7); these are the single copies.
"""
from __future__ import annotations

import numpy as np

from streamrank._numba import jit

__all__ = ["merge_diff", "soft"]


@jit
def soft(v, thr):
    """Soft threshold (Chen et al. eq. 7): sign(v) * max(|v| - thr, 0)."""
    if v > thr:
        return v - thr
    if v < -thr:
        return v + thr
    return 0.0


@jit
def merge_diff(pp, pi, px, mp, mi, mx, r, dj, dx):
    """Row r of X_pos minus row r of X_neg (sorted CSR rows) into (dj, dx); exact zeros dropped."""
    u = np.uint64  # unsigned indices: numba emits no negative-index wraparound code
    a = pp[r]
    a1 = pp[r + 1]
    b = mp[r]
    b1 = mp[r + 1]
    n = 0
    while a < a1 or b < b1:
        if b >= b1 or (a < a1 and pi[u(a)] < mi[u(b)]):
            j = pi[u(a)]
            v = np.float64(px[u(a)])
            a += 1
        elif a >= a1 or mi[u(b)] < pi[u(a)]:
            j = mi[u(b)]
            v = -np.float64(mx[u(b)])
            b += 1
        else:
            j = pi[u(a)]
            v = np.float64(px[u(a)]) - np.float64(mx[u(b)])
            a += 1
            b += 1
        if v != 0.0:
            dj[u(n)] = j
            dx[u(n)] = v
            n += 1
    return n
