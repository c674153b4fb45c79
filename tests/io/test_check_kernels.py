"""The read-check kernels (streamrank.io._check_kernels) against plain-numpy references, with edge cases."""
from __future__ import annotations

import numpy as np
import pytest

from streamrank.io import _check_kernels as K


# ----------------------------------------------------------------- references
def ref_first_bad_offset(a, lo, hi):
    a = np.asarray(a, dtype=np.int64)
    if a.size == 0:
        return -1
    bad = (a < lo) | (a > hi)
    bad[1:] |= a[1:] < a[:-1]
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else -1


def ref_first_out_of_range(a, n):
    hits = np.flatnonzero((np.asarray(a) < 0) | (np.asarray(a) >= n))
    return int(hits[0]) if hits.size else -1


def ref_first_bad_tuple(t, n_q, n_d):
    lim = np.array([n_q, n_d, n_d])
    hits = np.flatnonzero(((t < 0) | (t >= lim)).ravel())
    return int(hits[0]) if hits.size else -1


def ref_first_nonfinite(a):
    hits = np.flatnonzero(~np.isfinite(a))
    return int(hits[0]) if hits.size else -1


# ---------------------------------------------------------------- edge cases
@pytest.mark.parametrize("a, lo, hi", [
    ([], 0, 0), ([0], 0, 0), ([0, 0, 0], 0, 0), ([0, 3, 3, 7], 0, 7), ([0, 3, 2, 7], 0, 7),
    ([-1, 0], 0, 5), ([0, 6], 0, 5), ([2, 4], 0, 5), ([5, 4], 0, 5), ([0, 2**62, 3], 0, 2**63 - 1),
    ([-(2**63), 0], -(2**63), 0), ([3], 4, 9), ([9, 9], 4, 9),
])
def test_first_bad_offset_edges(a, lo, hi):
    a = np.asarray(a, dtype=np.int64)
    assert K.first_bad_offset(a, np.int64(lo), np.int64(hi)) == ref_first_bad_offset(a, lo, hi)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("a, n", [([], 0), ([], 3), ([0], 1), ([0], 0), ([0, 1, 2], 3), ([0, 3], 3),
                                  ([-1], 3), ([2, -2147483648], 3), ([2147483647], 2147483647),
                                  ([2147483646, -1], 2147483647), (list(range(5000)) + [-7], 5000),
                                  ([1] * 4096 + [9], 2), ([1] * 8192 + [1] * 5 + [-1] + [9], 2),
                                  ([1] * 4095 + [2], 2)])
def test_first_out_of_range_edges(a, n, dtype):
    a = np.asarray(a, dtype=dtype)
    assert K.first_out_of_range(K.unsigned(a), n) == ref_first_out_of_range(a, n)


def test_first_out_of_range_big_endian_view_of_little_endian_indices():
    # what an "endian": "big" edit of X/indices makes zarr decode: small indices become huge or negative
    a = np.arange(0, 300, dtype="<i4").view(">i4").astype(np.int32)
    assert K.first_out_of_range(K.unsigned(a), 300) == ref_first_out_of_range(a, 300) == 1


@pytest.mark.parametrize("t, nq, nd", [
    (np.zeros((0, 3)), 0, 0), ([[0, 0, 0]], 1, 1), ([[0, 0, 1]], 1, 1), ([[1, 0, 0]], 1, 1),
    ([[0, 0, 0], [0, -1, 0]], 1, 1), ([[0, 2, 1], [0, 1, 2]], 1, 3), ([[0, 2, 1], [0, 1, 3]], 1, 3),
])
def test_first_bad_tuple_edges(t, nq, nd):
    t = np.asarray(t, dtype=np.int64).reshape(-1, 3)
    assert K.first_bad_tuple(t, np.int64(nq), np.int64(nd)) == ref_first_bad_tuple(t, nq, nd)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, bad_at, bad", [(0, None, None), (1, 0, np.nan), (5000, None, None),
                                            (4096, 4095, np.inf), (4097, 4096, -np.inf), (9000, 8191, np.nan),
                                            (10, 3, np.nan)])
def test_first_nonfinite_edges(dtype, n, bad_at, bad):
    a = np.linspace(-1e30, 1e30, n).astype(dtype)
    if bad_at is not None:
        a[bad_at] = bad
        a[min(n - 1, bad_at + 2)] = np.nan           # a later one is not the first
    assert K.first_nonfinite(a) == ref_first_nonfinite(a)


def test_first_nonfinite_largest_finite_values_are_finite():
    a = np.array([np.finfo(np.float32).max, -np.finfo(np.float32).max, np.finfo(np.float32).tiny], np.float32)
    assert K.first_nonfinite(a) == -1
    assert K.first_nonfinite(np.array([np.finfo(np.float64).max, 5e-324])) == -1


def test_kernels_match_references_on_random_data():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        a = np.cumsum(rng.integers(-1, 4, n)).astype(np.int64)
        lo, hi = int(rng.integers(-2, 3)), int(rng.integers(0, 80))
        assert K.first_bad_offset(a, np.int64(lo), np.int64(hi)) == ref_first_bad_offset(a, lo, hi)
        idx = rng.integers(-3, 40, n).astype(np.int32)
        assert K.first_out_of_range(K.unsigned(idx), 37) == ref_first_out_of_range(idx, 37)
        t = rng.integers(-1, 9, (n, 3)).astype(np.int64)
        assert K.first_bad_tuple(t, np.int64(5), np.int64(8)) == ref_first_bad_tuple(t, 5, 8)
        x = rng.normal(size=n * 100).astype(np.float32)
        if n and rng.random() < 0.7:
            x[rng.integers(0, x.size, 3)] = rng.choice([np.nan, np.inf, -np.inf])
        assert K.first_nonfinite(x) == ref_first_nonfinite(x)


@pytest.mark.parametrize("firsts", [(0, 4096), (4095, 4096 * 3 + 7), (5000, 5001), (12_287, 12_288), (12_299, -1)])
def test_the_first_bad_entry_of_several_strides_is_named(firsts):
    """The stride loops run from the last stride back to the first: with bad entries in several strides (and in
    the last, partial one) the first is still the one named."""
    a, b = firsts
    x = np.ones(12_300, np.float32)
    idx = np.zeros(12_300, np.int32)
    for i, v in ((a, np.nan), (b, np.inf), (12_299, -np.inf)):
        x[i], idx[i] = v, 99 if i != b else -1
    assert K.first_nonfinite(x) == ref_first_nonfinite(x) == a
    assert K.first_nonfinite(x.astype(np.float64)) == a
    assert K.first_out_of_range(K.unsigned(idx), 37) == ref_first_out_of_range(idx, 37) == a


# ------------------------------------------- the callers' numpy path for short arrays
def test_read_checks_match_kernels_and_references():
    """``_read_checks``'s calls of the kernels give the references' answers, edge cases and every length."""
    from streamrank.io import _read_checks as R
    edges = [([], 0, 0), ([0], 0, 0), ([0, 3, 2, 7], 0, 7), ([-1, 0], 0, 5), ([0, 6], 0, 5), ([3], 4, 9),
             ([5, 4], 0, 5), ([9, 9], 4, 9), ([0, 2**62, 3], 0, 2**63 - 1), ([-(2**63), 0], -(2**63), 0)]
    for a, lo, hi in edges:
        a = np.asarray(a, dtype=np.int64)
        assert R.first_bad_offset(a, lo, hi) == K.first_bad_offset(a, np.int64(lo), np.int64(hi)) \
            == ref_first_bad_offset(a, lo, hi)
    rng = np.random.default_rng(1)
    for n in [0, 1, 2, 7, 300, 4095, 4096, 70_000]:
        for _ in range(4):
            a = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
            if n and rng.random() < 0.75:
                a[rng.integers(0, n)] += int(rng.choice([-5, 10**6]))
            lo, hi = int(rng.integers(-1, 2)), int(a.max(initial=0)) - int(rng.integers(0, 2))
            assert R.first_bad_offset(a, lo, hi) == ref_first_bad_offset(a, lo, hi)
            for dtype in (np.float32, np.float64):
                x = rng.normal(size=n).astype(dtype)
                if n and rng.random() < 0.75:
                    x[rng.integers(0, n, 2)] = rng.choice([np.nan, np.inf, -np.inf])
                assert R.first_nonfinite(x) == K.first_nonfinite(x) == ref_first_nonfinite(x)


# ------------------------------------------------- the loads stay contiguous
_GATHER_FREE = [
    ("first_out_of_range", (np.zeros(3, np.uint32), 2)),
    ("first_out_of_range", (np.zeros(3, np.uint64), 2)),
    ("first_nonfinite", (np.zeros(3, np.float32),)),
    ("first_nonfinite", (np.zeros(3, np.float64),)),
]


@pytest.mark.skipif(__import__("platform").machine().lower() not in ("x86_64", "amd64"),
                    reason="reads x86-64 machine code")
@pytest.mark.parametrize("name, args", _GATHER_FREE, ids=lambda v: v if isinstance(v, str) else None)
def test_check_kernels_compile_without_gathers(name, args):
    """The stride loops load contiguously: their machine code holds no gather instruction.

    Compiled afresh (numba does not show the machine code of a cached kernel).  Indexing the whole array over
    ``range(s, e)`` made LLVM load through gathers (numba's negative-index wraparound), 10-12 times slower on an
    AMD Zen 4; on a CPU without gathers this holds trivially.
    """
    import numba

    made = getattr(K, name)                   # a LazyKernel or its dispatcher: both give these two
    options = {k: v for k, v in made.targetoptions.items() if k != "nopython"}     # its own (fastmath...)
    kernel = numba.njit(cache=False, **options)(made.py_func)
    kernel(*args)
    (asm,) = kernel.inspect_asm().values()
    assert "gather" not in asm, f"{name} on {args[0].dtype} loads through gathers"
