"""The read checks' numpy twins (streamrank.io._read_checks) against the kernels: the same first bad position.

Both sides of NUMPY_BELOW, both decisions (``twin=True/False`` and
``streamrank._numba.twins``), and the decision for a chunk (:func:`check_twin`).
Stores read both ways: ``tests/hardening/test_check_twins_stores.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

from streamrank._numba import twins
from streamrank.io import _check_kernels as K
from streamrank.io import _read_checks as R

N = R.NUMPY_BELOW
SIZES = [0, 1, 2, 4095, 4096, 4097, N - 1, N, N + 1, 3 * N + 17]


def both_ways(fn, *args):
    """fn(*args, twin=...) for the numpy form, the kernel, and each decided by use_twin under twins(True/False)."""
    got = {fn(*args, twin=True), fn(*args, twin=False)}
    for forced in (True, False):
        with twins(forced):
            got.add(fn(*args))
    assert len(got) == 1, got
    return got.pop()


def ref_first(bad):
    hits = np.flatnonzero(np.asarray(bad).ravel())
    return int(hits[0]) if hits.size else -1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_first_nonfinite_twin(dtype, n):
    rng = np.random.default_rng(n)
    a = (rng.normal(size=n) * 1e30).astype(dtype)
    assert both_ways(R.first_nonfinite, a) == int(K.first_nonfinite(a)) == -1
    for bad in (np.nan, np.inf, -np.inf):
        for at in {0, n // 2, n - 1} if n else ():
            b = a.copy()
            b[at] = bad
            b[min(n - 1, at + 3)] = np.nan                  # a later one is not the first
            b.setflags(write=False)                          # read-only buffers (memory-mapped blocks)
            assert both_ways(R.first_nonfinite, b) == int(K.first_nonfinite(b)) == ref_first(~np.isfinite(b)) == at


def test_first_nonfinite_twin_largest_finite_values():
    for dtype in (np.float32, np.float64):
        fi = np.finfo(dtype)
        a = np.tile(np.array([fi.max, -fi.max, fi.tiny, -0.0], dtype=dtype), N)   # a sum would overflow
        assert both_ways(R.first_nonfinite, a) == -1


@pytest.mark.parametrize("n", SIZES)
def test_first_bad_offset_twin(n):
    rng = np.random.default_rng(n + 1)
    a = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    hi = int(a[-1]) if n else 0
    assert both_ways(R.first_bad_offset, a, 0, hi) == -1
    cases = [(0, hi)] if not n else [(1, hi), (0, hi - 1), (-5, hi)]
    for lo, top in cases:
        want = int(K.first_bad_offset(a, np.int64(lo), np.int64(top)))
        assert both_ways(R.first_bad_offset, a, lo, top) == want
    for at in {0, n // 2, n - 1} if n else ():
        for delta in (-7, 10**9):
            b = a.copy()
            b[at] += delta
            want = int(K.first_bad_offset(b, np.int64(0), np.int64(hi)))
            assert both_ways(R.first_bad_offset, b, 0, hi) == want >= 0


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n", SIZES)
def test_first_out_of_range_twin(dtype, n):
    rng = np.random.default_rng(n + 2)
    m = 1000
    a = rng.integers(0, m, n).astype(dtype)
    assert both_ways(R.first_out_of_range, a, m) == -1
    for bad in (-1, m, np.iinfo(dtype).min, np.iinfo(dtype).max):
        for at in {0, n // 2, n - 1} if n else ():
            b = a.copy()
            b[at] = bad
            b.setflags(write=False)
            want = int(K.first_out_of_range(K.unsigned(b), m))
            assert both_ways(R.first_out_of_range, b, m) == want == at


def test_first_out_of_range_twin_non_contiguous():
    a = np.arange(2 * N, dtype=np.int32)[::2]             # the unsigned view copies it, as before
    assert both_ways(R.first_out_of_range, a, 2 * N) == -1
    assert both_ways(R.first_out_of_range, a, N + 3) == (N + 4) // 2


@pytest.mark.parametrize("rows", [0, 1, N // 3 - 1, N // 3 + 1, N])
def test_first_bad_tuple_twin(rows):
    rng = np.random.default_rng(rows)
    nq, nd = 50, 900
    t = np.column_stack([rng.integers(0, nq, rows), rng.integers(0, nd, (rows, 2))]).astype(np.int64)
    assert both_ways(R.first_bad_tuple, t, nq, nd) == -1
    for r in {0, rows // 2, rows - 1} if rows else ():
        for c, bad in ((0, nq), (0, -1), (1, nd), (2, -3), (1, nq)):   # nq is fine in columns 1, 2
            u = t.copy()
            u[r, c] = bad
            u[r, 2] = -1 if c < 2 else u[r, 2]             # a later column of the same row is not the first
            want = int(K.first_bad_tuple(u, np.int64(nq), np.int64(nd)))
            assert both_ways(R.first_bad_tuple, u, nq, nd) == want == \
                ref_first((u < 0) | (u >= np.array([nq, nd, nd])))


def test_random_inputs_twin_equals_kernel():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.choice([int(rng.integers(0, 50)), int(rng.integers(N, 2 * N))]))
        x = rng.normal(size=n).astype(rng.choice([np.float32, np.float64]))
        if n and rng.random() < 0.7:
            x[rng.integers(0, n, 3)] = rng.choice([np.nan, np.inf, -np.inf])
        assert both_ways(R.first_nonfinite, x) == int(K.first_nonfinite(x))
        a = np.cumsum(rng.integers(-1, 4, n)).astype(np.int64)
        lo, hi = int(rng.integers(-2, 3)), int(rng.integers(0, 2 * n + 2))
        assert both_ways(R.first_bad_offset, a, lo, hi) == int(K.first_bad_offset(a, np.int64(lo), np.int64(hi)))
        idx = rng.integers(-3, 40, n).astype(np.int32)
        assert both_ways(R.first_out_of_range, idx, 37) == int(K.first_out_of_range(K.unsigned(idx), 37))


def test_numpy_below_the_threshold_whatever_use_twin_says():
    """Short arrays are numpy's even when the kernels are forced (no kernel compiled for labels or offsets)."""
    with twins(False):
        assert R._numpy_here("finite", N - 1) and not R._numpy_here("finite", N)
    with twins(True):
        assert R._numpy_here("finite", N) and R._numpy_here("tuples", 10**9)
    assert R._numpy_here("range", N, twin=True) and not R._numpy_here("range", N, twin=False)
