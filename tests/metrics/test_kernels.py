"""Metric kernels against brute-force references, incl. edge cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import metrics_reference as ref
from streamrank.metrics import _kernels as K


def _ro(a):
    a = np.array(a)
    a.setflags(write=False)
    return a


def _groups(draw_sizes, rng, levels=3, score_levels=4, dtype=np.float64):
    sizes = np.asarray(draw_sizes, dtype=np.int64)
    m = int(sizes.sum())
    y = rng.integers(0, levels, size=m).astype(np.float64)
    s = rng.integers(0, score_levels, size=m).astype(dtype)
    gp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return y, s, gp


def _f64(a):
    """The boundary hands the kernels writeable C float64 (see metrics._checks.check_scores)."""
    return np.require(a, dtype=np.float64, requirements=["C", "W"])


def _ndcg(y, s, gp, k):
    y, s, gp = _f64(y), _f64(s), np.require(gp, np.int64, ["C", "W"])
    out = np.empty((len(gp) - 1, 1))
    K.ndcg_groups(y, s, gp, y, gp, np.array([k], np.int64), True, out)
    return out[:, 0]


def _ap(y, s, gp, k=0):
    y, s, gp = _f64(y), _f64(s), np.require(gp, np.int64, ["C", "W"])
    pos = np.concatenate(([0], np.cumsum(y > 0)))
    out = np.empty((len(gp) - 1, 1))
    K.average_precision_groups(y, s, gp, (pos[gp[1:]] - pos[gp[:-1]]).astype(np.int64), np.array([k], np.int64), out)
    return out[:, 0]


def _run_all(y, s, gp, k):
    g = len(gp) - 1
    nd = _ndcg(y, s, gp, k)
    d, t, p = (np.empty(g, np.int64) for _ in range(3))
    K.cindex_groups(_f64(y), _f64(s), np.require(gp, np.int64, ["C", "W"]), d, t, p)
    return nd, (d, t, p), _ap(y, s, gp)


def _check(y, s, gp, k):
    nd, (d, t, p), ap = _run_all(y, s, gp, k)
    for g in range(len(gp) - 1):
        a, b = gp[g], gp[g + 1]
        yy, ss = np.asarray(y[a:b]), np.asarray(s[a:b])
        kk = None if k <= 0 else k
        np.testing.assert_allclose(nd[g], ref.ndcg_expected(yy, ss, kk), rtol=1e-12, equal_nan=True)
        assert (d[g], t[g], p[g]) == ref.cindex_counts(yy, ss)
        np.testing.assert_allclose(ap[g], ref.average_precision_expected(yy, ss), rtol=1e-12, equal_nan=True)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=6),
       seed=st.integers(0, 2**32 - 1), k=st.integers(0, 6),
       f32=st.booleans(), levels=st.integers(1, 5), score_levels=st.integers(1, 12))
def test_kernels_match_reference(sizes, seed, k, f32, levels, score_levels):
    rng = np.random.default_rng(seed)
    y, s, gp = _groups(sizes, rng, levels, score_levels, np.float32 if f32 else np.float64)
    _check(y, s, gp, k)


def test_ndcg_ties_equal_exhaustive_average():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 7))
        y = rng.integers(0, 4, n).astype(float)
        s = rng.integers(0, 3, n).astype(float)
        for k in (1, 3, None):
            out = _ndcg(y, s, np.array([0, n]), 0 if k is None else k)
            np.testing.assert_allclose(out[0], ref.ndcg_bruteforce(y, s, k), rtol=1e-12, equal_nan=True)


def test_edge_cases():
    # empty input, zero groups
    nd, (d, t, p), ap = _run_all(np.zeros(0), np.zeros(0), np.zeros(1, np.int64), 10)
    assert nd.shape == d.shape == ap.shape == (0,)
    # an empty group, a one-row group, all-tied labels, all-tied scores
    y = np.array([1.0, 2, 2, 2, 0, 1, 2, 3])
    s = np.array([0.5, 1, 2, 3, 7, 7, 7, 7])
    gp = np.array([0, 0, 1, 4, 8])
    nd, (d, t, p), ap = _run_all(_ro(y), _ro(s), _ro(gp), 10)
    assert np.isnan(nd[0]) and np.isnan(ap[0]) and p[0] == 0
    assert nd[1] == 1.0 and p[1] == 0 and ap[1] == 1.0          # one relevant row
    assert nd[2] == 1.0 and p[2] == 0                           # all labels tied
    assert (d[3], t[3], p[3]) == (0, 6, 6)                      # all scores tied
    _check(y, s, gp, 10)
    # all-zero labels: ideal DCG 0 and no relevant item -> NaN
    nd, _, ap = _run_all(np.zeros(3), np.arange(3.0), np.array([0, 3]), 10)
    assert np.isnan(nd[0]) and np.isnan(ap[0])


def test_float32_and_float64_scores_agree():
    rng = np.random.default_rng(3)
    y, s, gp = _groups([5, 8, 13], rng, 4, 100)
    a = _run_all(y, s, gp, 5)
    b = _run_all(y, s.astype(np.float32), gp, 5)
    np.testing.assert_allclose(a[0], b[0])
    for u, v in zip(a[1], b[1]):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_allclose(a[2], b[2])


def test_large_group_cindex_matches_pairs():
    rng = np.random.default_rng(7)
    n = 600
    y = rng.integers(0, 5, n).astype(float)
    s = np.round(rng.normal(size=n), 1)
    assert K.cindex_group(y, _f64(s), 0, n) == ref.cindex_counts(y, s)


def test_ap_without_ties_is_textbook():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 30).astype(float)
    s = rng.permutation(30).astype(float)
    out = _ap(y, s, np.array([0, 30]))
    assert out[0] == pytest.approx(ref.average_precision_no_ties(y, s), rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 40), seed=st.integers(0, 10**6), levels=st.integers(1, 8), f32=st.booleans())
def test_auc_counts_match_pairs(n, seed, levels, f32):
    rng = np.random.default_rng(seed)
    pos = _ro(rng.random(n) < 0.4)
    s = _ro(rng.integers(0, levels, n).astype(np.float32 if f32 else np.float64))
    wrong, pairs = K.auc_counts(_f64(pos), _f64(s))
    d, t, p = ref.cindex_counts(pos.astype(float), s)
    assert pairs == p and wrong == d + 0.5 * t


def test_ndcg_with_negative_labels_never_exceeds_one():
    """Negative labels give negative gains: a query whose ideal DCG is <= 0 is skipped, never > 1."""
    y = np.array([1.0, -3, -2, 0, -2, -1.0, -4, -4])      # group 0: ideal DCG < 0 over all 5; group 1: all negative
    s = np.array([0.1, 0.9, 0.5, 0.3, 0.2, 0.3, 0.2, 0.1])
    gp = np.array([0, 5, 8], dtype=np.int64)
    nd, _, _ = _run_all(y, s, gp, 10)
    assert np.isnan(nd).all(), nd
    rng = np.random.default_rng(3)
    for _ in range(200):                                    # mixed signs: either skipped or in [-inf, 1]
        n = int(rng.integers(1, 9))
        yy = rng.integers(-4, 4, size=n).astype(np.float64)
        ss = rng.normal(size=n)
        out = _ndcg(yy, ss, np.array([0, n], dtype=np.int64), int(rng.integers(0, 6)))
        assert np.isnan(out[0]) or out[0] <= 1.0 + 1e-12
    _check(y, s, gp, 3)


@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_stable_order_is_numpys_stable_argsort(direction):
    """The kernels' own merge sort gives numpy's stable permutation: ties, NaN last, -0.0 == 0.0, empty, odd sizes."""
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 3, 7, 16, 33, 100, 1025):
        for case in range(6):
            a = rng.integers(0, 4, n).astype(np.float64) if case % 2 else rng.standard_normal(n)
            if case >= 2 and n:
                a[rng.random(n) < 0.25] = -0.0 if case == 2 else np.nan
            if case == 5 and n:
                a[rng.random(n) < 0.25] = np.inf * rng.choice([-1.0, 1.0])
            padded = np.concatenate((rng.standard_normal(3), a, rng.standard_normal(2)))
            got = K._stable_order(padded, 3, 3 + n, direction)
            want = np.argsort(-a if direction < 0 else a, kind="stable")
            np.testing.assert_array_equal(got, want)
    words = rng.integers(0, 3, 50).astype(np.uint64)
    np.testing.assert_array_equal(K._stable_order(words, 0, 50, direction), np.argsort(words if direction > 0 else ~words, kind="stable"))
