"""numpy twins of the scaling kernels (:mod:`._statistics_kernels`), and the one helper that picks a twin or a kernel.

Why (issue 22): a process that fits RankRLS on a small store (MQ2008: 9,630
rows x 46 features) spends ~0.5-0.9 s importing numba and setting it up for
the first kernel it runs, and a cold one compiles ``fill_scaled`` besides
(~0.7 s), where numpy does the same block in a few milliseconds.
:func:`fill_scaled` and :func:`scale_in_place_f` run the numpy twin while
:func:`streamrank._numba.use_twin` says so (numba not set up in this process
and the budget of estimated twin work not spent), else the kernel: the
rent-or-buy rule of :mod:`streamrank._numba`.

A twin gives the kernel's result bit for bit (``tests/rankrls/test_statistics_twins.py``
compares the bytes, the sign of zero included): the same float64 operations
in the same order on every entry.

* The group sums.  The kernel adds a group's rows one after the other, from
  0.0, in float64.  ``np.add.reduceat`` along the rows sums pairwise (it
  differed in all of 200 random 200 x 3 groups, measured), and ``sum(axis=0)``
  is sequential only for a C-ordered block, by numpy's choice of loop order.
  So the twin says what it adds: groups sorted by size, longest first; the
  longest few one by one with ``np.add.accumulate`` along their rows
  (sequential by definition), the rest *position by position* (step ``p``
  adds the ``p``-th row of every group that has one, a whole-array add of
  the partial sums).  The Python steps (:func:`_steps`) are counted in the
  estimate.
* The centring and scaling: ``sx[i] * (Φ[i, j] - T[g, j] * inv_g)`` with
  ``inv_g = 1 / n_g`` (0.0 for groups not centred), as in ``fill_scaled``;
  ``sx[i] * (A[i, j] - m_g)`` with ``m_g = T[g, j] / n_g`` (0.0 when not
  centred), as in ``scale_in_place_f``.  numba compiles these without
  fast-math, so no fused multiply-add: numpy's separate roundings match.

Contracts are the kernels': Φ float32 or float64 (each entry converted to
float64), Φ may alias ``A[:, :n]`` (the twin computes a group's new rows
from values it read before writing any), rows outside ``group_ptr`` are
untouched, T is overwritten with the unscaled, uncentred sums, empty groups
get zero sums and no rows.
"""
from __future__ import annotations

import numpy as np

from .._numba import use_twin
from . import _statistics_kernels as _sk

__all__ = ["fill_scaled", "scale_in_place_f", "fill_scaled_numpy", "scale_in_place_f_numpy"]

#: Seconds of twin work: per call, per float64 entry written (rows x (n + v)) and per Python step of the group
#: sums (:func:`_steps`).  Measured with ``fill_scaled_numpy`` on this 2-core machine (best of 20,
#: OPENBLAS_NUM_THREADS=1): MQ2008 Fold1 train, 9,630 x 47, 82 steps: 2.5 ms (5.6 ns an entry); the README's ten
#: lines, 15,000 x 21, 40 steps: 2.0 ms; 100,000 x 51 in groups of 20-180: 42 ms (8.3 ns); one group of
#: 20,000 x 5: 1.7 ms; 2,000 groups of 5 x 11: 1.3 ms; 10 x 4 in 2 groups: 0.08 ms (the call itself); 20,000
#: steps of the position loop alone: 5.4 us each.  Rounded up to 0.2 ms a call, 20 ns an entry, 10 us a step
#: (the estimates are 2.5-4x the measured times of the blocks above).
_S_PER_CALL = 2e-4
_S_PER_ENTRY = 2e-8
_S_PER_STEP = 1e-5


def _estimate_s(rows: int, width: int, steps: int) -> float:
    """Estimated seconds of a twin on ``rows`` x ``width`` entries summed in ``steps`` Python steps (:func:`_steps`)."""
    return _S_PER_CALL + _S_PER_ENTRY * rows * width + _S_PER_STEP * steps


def _twin_here(group_ptr, rows: int, width: int) -> bool:
    return use_twin(_estimate_s(rows, width, _steps(group_ptr)))


def fill_scaled(Phi, Y, sx, sy, group_ptr, center, A, T) -> None:
    """:func:`._statistics_kernels.fill_scaled`, by its numpy twin while :func:`~streamrank._numba.use_twin`
    says so (see the module doc), else by the kernel; the same bits either way."""
    if _twin_here(group_ptr, Phi.shape[0], Phi.shape[1] + Y.shape[1]):
        fill_scaled_numpy(Phi, Y, sx, sy, group_ptr, center, A, T)
    else:
        _sk.fill_scaled(Phi, Y, sx, sy, group_ptr, center, A, T)


def scale_in_place_f(A, n, Y, sx, sy, group_ptr, center, T) -> None:
    """:func:`._statistics_kernels.scale_in_place_f`, by its numpy twin under
    :func:`~streamrank._numba.use_twin`, else by the kernel; the same bits either way."""
    if _twin_here(group_ptr, A.shape[0], A.shape[1]):
        scale_in_place_f_numpy(A, n, Y, sx, sy, group_ptr, center, T)
    else:
        _sk.scale_in_place_f(A, n, Y, sx, sy, group_ptr, center, T)


def _group_sums(U, size) -> np.ndarray:
    """Sums of the groups of U's rows (``size[g]`` consecutive rows each), added row after row from 0.0 in float64,
    as the kernels add them.

    Groups sorted by size, longest first.  The ``j`` longest are summed one
    by one with ``np.add.accumulate`` along the rows (sequential by
    definition; it starts from the first row instead of 0.0, which differs
    only in the sign of an all-(-0.0) sum, so ``+ 0.0`` at the end makes it
    the kernel's); the others position by position: the groups that have a
    ``p``-th row are a prefix of that order, and step ``p`` adds those rows
    to their sums at once (an elementwise add, no pairwise summation).
    ``j`` minimises the Python steps, ``j`` + the ``j``-th size (:func:`_steps`).
    """
    n_groups = size.shape[0]
    S = np.zeros((n_groups, U.shape[1]))
    if n_groups == 0 or U.shape[0] == 0:
        return S
    order = np.argsort(-size, kind="stable")
    size_sorted = size[order]
    start = (np.cumsum(size) - size)[order]
    j = _split(size_sorted)
    acc = np.zeros((n_groups, U.shape[1]))
    for g in range(j):
        a = int(start[g])
        acc[g] = np.add.accumulate(U[a:a + int(size_sorted[g])], axis=0)[-1]
    acc[:j] += 0.0
    live = n_groups
    for p in range(int(size_sorted[j]) if j < n_groups else 0):
        while size_sorted[live - 1] <= p:
            live -= 1
        acc[j:live] += U[start[j:live] + p]
    S[order] = acc
    return S


def _split(size_sorted) -> int:
    """How many of the longest groups :func:`_group_sums` sums one by one: the fewest Python steps."""
    cost = np.arange(size_sorted.shape[0] + 1) + np.append(size_sorted, 0)
    return int(np.argmin(cost))


def _steps(group_ptr) -> int:
    """Python steps of :func:`_group_sums` for the groups of ``group_ptr``."""
    size = np.sort(np.diff(np.asarray(group_ptr, dtype=np.int64)))[::-1]
    j = _split(size)
    return j + (int(size[j]) if j < size.shape[0] else 0)


def _block(gp):
    """(r0, r1, group sizes, group of each row of r0:r1) of the nondecreasing offsets ``gp``."""
    gp = np.asarray(gp, dtype=np.int64)
    if gp.shape[0] < 2:
        return 0, 0, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    size = np.diff(gp)
    return int(gp[0]), int(gp[-1]), size, np.repeat(np.arange(size.shape[0]), size)


def fill_scaled_numpy(Phi, Y, sx, sy, group_ptr, center, A, T) -> None:
    """The numpy twin of :func:`._statistics_kernels.fill_scaled` (bit for bit; see the module doc).

    ``group_ptr`` nondecreasing (the callers' blocks of whole groups).
    """
    n, v = Phi.shape[1], Y.shape[1]
    r0, r1, size, group = _block(group_ptr)
    U = np.empty((r1 - r0, n + v))
    U[:, :n] = Phi[r0:r1]                    # float32 -> float64 exactly; read before A is written (alias)
    U[:, n:] = Y[r0:r1]
    S = _group_sums(U, size)
    T[...] = S
    inv = np.zeros(size.shape[0])
    live = np.asarray(center, dtype=bool) & (size > 0)
    inv[live] = 1.0 / size[live]
    U -= (S * inv[:, None])[group]
    U[:, :n] *= np.asarray(sx[r0:r1], dtype=np.float64)[:, None]
    U[:, n:] *= np.asarray(sy[r0:r1], dtype=np.float64)[:, None]
    A[r0:r1, : n + v] = U


def scale_in_place_f_numpy(A, n, Y, sx, sy, group_ptr, center, T) -> None:
    """The numpy twin of :func:`._statistics_kernels.scale_in_place_f` (bit for bit; see the module doc)."""
    v = Y.shape[1]
    r0, r1, size, group = _block(group_ptr)
    U = np.empty((r1 - r0, n + v))
    U[:, :n] = A[r0:r1, :n]
    U[:, n:] = Y[r0:r1]
    S = _group_sums(U, size)
    T[...] = S
    M = np.zeros_like(S)
    live = np.asarray(center, dtype=bool) & (size > 0)
    M[live] = S[live] / size[live][:, None]
    U -= M[group]
    U[:, :n] *= np.asarray(sx[r0:r1], dtype=np.float64)[:, None]
    U[:, n:] *= np.asarray(sy[r0:r1], dtype=np.float64)[:, None]
    A[r0:r1, : n + v] = U
