"""Numba kernels that check data read from disk before any other kernel sees it.

Only jitted functions of arrays and scalars live here (see
:mod:`streamrank._numba`).  Each is one pass over its input, allocates
nothing, and returns the position of the first violation or ``-1``: the
caller (:mod:`streamrank.io._read_checks`) turns a position into a
:class:`~streamrank.io.schema.StoreFormatError` naming the store, the array
and the rows.  The plain-numpy references the tests compare against are in
``tests/io/test_check_kernels.py``.

* :func:`first_bad_offset`: offsets (CSR ``indptr``, ``group_ptr``) must stay
  within ``[lo, hi]`` and never decrease: the first ``i`` with
  ``a[i] < a[i-1]``, ``a[i] < lo`` or ``a[i] > hi``.
* :func:`first_out_of_range`: the first ``i`` with ``a[i] < 0`` or
  ``a[i] >= n`` (CSR column indices, tuple row indices), given the unsigned
  view of ``a`` (:func:`unsigned`).
* :func:`first_bad_tuple`: the first flat position ``3 r + c`` of a
  ``(l, 3)`` tuple array whose column 0 is outside ``[0, n_q)`` or columns
  1, 2 outside ``[0, n_d)``.
* :func:`first_nonfinite`: the first flat position holding NaN or ±inf.

The stride loops of :func:`first_out_of_range` and :func:`first_nonfinite`
index a view of the stride from 0 (``w = a[s:s + step]``, then ``w[i]``),
never ``a[i]`` for ``i`` in ``range(s, e)``: numba wraps a negative index
around, LLVM cannot prove ``i >= 0`` there, and it vectorised those loads as
gathers, which an AMD Zen 4 runs 10-12 times slower than contiguous loads
(60 against 5 us a 512 KiB block, measured; the read check then cost +21 %
of a CSR block pass instead of +2.6 %, ``benchmarks/stream_throughput.py``
section 6).  ``tests/io/test_check_kernels.py`` fails if their machine code
holds a gather.
"""
from __future__ import annotations

import numpy as np

from .._numba import jit

__all__ = ["first_bad_offset", "first_out_of_range", "first_bad_tuple", "first_nonfinite", "unsigned"]


def unsigned(a: np.ndarray) -> np.ndarray:
    """The unsigned view (same bytes, no copy) of a contiguous signed integer array, for :func:`first_out_of_range`."""
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


@jit
def first_bad_offset(a, lo, hi):
    """First position where offsets ``a`` leave ``lo <= a[0] <= a[1] <= ... <= a[-1] <= hi``; -1 if none."""
    n = a.shape[0]
    if n == 0:
        return -1
    if a[0] < lo or a[0] > hi:
        return 0
    prev = a[0]
    for i in range(1, n):
        v = a[i]
        if v < prev or v > hi:
            return i
        prev = v
    return -1


@jit
def first_out_of_range(u, n):
    """First ``i`` with ``u[i] >= n`` in an *unsigned view* of signed indices; -1 if none.

    Pass ``a.view(np.uint32)`` (or uint64) of signed indices ``a``: a negative
    index is huge when seen as unsigned, so one comparison a value covers
    both ``a[i] < 0`` and ``a[i] >= n`` (``0 <= n < 2**(bits - 1)``).  The
    largest value of each stride of 4096 is taken first (an unsigned max
    reduction: one vector instruction per 8 int32, about 3x faster than
    OR-ing comparison flags, measured); the position is looked for only in a
    stride whose maximum is ``>= n``.
    """
    m = u.shape[0]
    step = 4096
    nu = u.dtype.type(n)
    for s in range(0, m, step):
        w = u[s:s + step]
        top = u.dtype.type(0)
        for i in range(w.shape[0]):
            v = w[i]
            top = v if v > top else top
        if top >= nu:
            for i in range(w.shape[0]):
                if w[i] >= nu:
                    return s + i
    return -1


@jit
def first_bad_tuple(t, n_q, n_d):
    """First flat position ``3 r + c`` of ``t`` (l, 3) outside its range (col 0: n_q, cols 1-2: n_d); -1 if none."""
    for r in range(t.shape[0]):
        if t[r, 0] < 0 or t[r, 0] >= n_q:
            return 3 * r
        if t[r, 1] < 0 or t[r, 1] >= n_d:
            return 3 * r + 1
        if t[r, 2] < 0 or t[r, 2] >= n_d:
            return 3 * r + 2
    return -1


@jit(fastmath={"reassoc"})
def first_nonfinite(a):
    """First position of the 1-D array ``a`` holding NaN or ±inf; -1 if all finite.

    ``v * 0`` is 0 for a finite ``v`` and NaN for NaN and ±inf, so a sum of
    them over a stride of 4096 is NaN exactly when the stride holds a bad
    value, in whatever order it is added: the one fast-math flag allowed
    here, ``reassoc``, lets the sum vectorise without changing its result
    (a sum of zeros and NaNs).  The position is looked for only in a stride
    whose sum is NaN.
    """
    n = a.shape[0]
    step = 4096
    zero = a.dtype.type(0)
    for s in range(0, n, step):
        w = a[s:s + step]
        acc = zero
        for i in range(w.shape[0]):
            acc += w[i] * zero
        if acc != acc:
            for i in range(w.shape[0]):
                if not np.isfinite(w[i]):
                    return s + i
    return -1
