"""Column moments of one dense block in two fused passes (numba), for :mod:`streamrank.normalize`.

``block_moments(X, mean, m2, mn, mx)`` writes, per column j of the (rows, n)
block X (float32 or float64, C-contiguous, rows >= 1), in float64:

    mean_j = Σ_i x_ij / rows,   m2_j = Σ_i (x_ij − mean_j)²,   mn_j = min_i x_ij,   mx_j = max_i x_ij

Pass 1 sums and takes min/max, pass 2 sums the squared deviations from the
block mean (the two-pass formula: no cancellation).  Row-major loops with the
column index innermost, so both passes stream X once in memory order and
need no temporary the size of the block (numpy's version makes three).
Blocks are merged by :meth:`streamrank.normalize.FeatureMoments.merge`.
"""
from __future__ import annotations

from ._numba import jit

__all__ = ["block_moments"]


@jit
def block_moments(X, mean, m2, mn, mx):
    rows, n = X.shape
    for j in range(n):
        mean[j] = 0.0
        m2[j] = 0.0
        mn[j] = X[0, j]
        mx[j] = X[0, j]
    for i in range(rows):
        for j in range(n):
            v = float(X[i, j])
            mean[j] += v
            if v < mn[j]:
                mn[j] = v
            if v > mx[j]:
                mx[j] = v
    for j in range(n):
        mean[j] /= rows
    for i in range(rows):
        for j in range(n):
            d = float(X[i, j]) - mean[j]
            m2[j] += d * d
