"""Numerical edge cases: finite models that agree with brute force, or a clear error.

The reference builds every within-group pair explicitly (the difference
matrix D, one row e_i - e_j per pair i < j of a group) and solves
``(XᵀDᵀDX + αI) w = XᵀDᵀDy`` densely — cost (21) of Pahikkala et al. 2009.
Predictions are compared (they are what a ranking uses, and they are defined
even where w is not unique).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import streamrank as sr


def brute_w(X, y, q, alpha):
    X = np.asarray(X, dtype=np.float64)
    rows = []
    for g in np.unique(q):
        idx = np.flatnonzero(q == g)
        for a in range(len(idx)):
            for b in range(a + 1, len(idx)):
                r = np.zeros(len(y))
                r[idx[a]], r[idx[b]] = 1.0, -1.0
                rows.append(r)
    D = np.array(rows) if rows else np.zeros((0, len(y)))
    A = X.T @ D.T @ D @ X + alpha * np.eye(X.shape[1])
    return np.linalg.solve(A, X.T @ D.T @ (D @ y))


RNG = np.random.default_rng(0)
X0 = RNG.normal(size=(40, 5))
Y0 = RNG.normal(size=40)
Q0 = np.repeat(np.arange(8), 5)


def _const_col(X):
    X = X.copy()
    X[:, 2] = 3.0
    return X


CASES = {
    "groups_of_one_row": (X0, Y0, np.arange(40), 1.0),
    "all_tied_groups": (X0, np.repeat(RNG.normal(size=8), 5), Q0, 1.0),
    "single_group": (X0, Y0, np.zeros(40, dtype=int), 1.0),
    "constant_feature": (_const_col(X0), Y0, Q0, 1.0),
    "duplicated_rows": (np.repeat(X0, 2, axis=0), np.repeat(Y0, 2), np.repeat(Q0, 2), 1.0),
    "scale_1e30": (X0 * 1e30, Y0, Q0, 1.0),
    "scale_1e-30": (X0 * 1e-30, Y0, Q0, 1.0),
    "scale_1e30_alpha_scaled": (X0 * 1e30, Y0, Q0, 1e60),
    "alpha_1e-12": (X0, Y0, Q0, 1e-12),
    "alpha_1e12": (X0, Y0, Q0, 1e12),
    "rank_deficient_alpha_1e-12": (np.c_[X0, X0[:, :2] + X0[:, 2:4]], Y0, Q0, 1e-12),
    "rank_deficient_alpha_1": (np.c_[X0, X0[:, :2] + X0[:, 2:4]], Y0, Q0, 1.0),
}


@pytest.mark.parametrize("solver", ["primal", "cg"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_rankrls_edge_cases_match_brute_force(case, solver):
    X, y, q, alpha = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no silent trouble: any warning fails here
        m = sr.RankRLS(alpha=alpha, solver=solver, tol=1e-12).fit(X, y, q)
    assert np.all(np.isfinite(m.coef_))
    p, ref = X @ m.coef_, X @ brute_w(X, y, q, alpha)
    tol = 1e-8 if solver == "primal" else 1e-6
    # no pairs / all tied: the exact model is 0, and rounding may leave ~1e-16 |y|
    assert np.abs(p - ref).max() <= tol * np.abs(ref).max() + 1e-12 * np.abs(y).max()


@pytest.mark.parametrize("case", ["single_group", "duplicated_rows", "rank_deficient_alpha_1", "all_tied_groups"])
def test_streaming_equals_in_memory_on_edge_cases(case):
    X, y, q, alpha = CASES[case]
    full = sr.RankRLS(alpha=alpha, solver="primal").fit(X, y, q)
    for max_rows in (1, 3, 7):
        m = sr.RankRLS(alpha=alpha, solver="primal").fit(X, y, q, max_rows=max_rows)
        np.testing.assert_allclose(X @ m.coef_, X @ full.coef_, rtol=1e-10, atol=1e-12 * max(1, np.abs(X @ full.coef_).max()))


def test_semidefinite_kernel_matrix():
    # linear kernel on more rows than features: K = XXᵀ has rank 5 < 40
    X, y, q, _ = CASES["rank_deficient_alpha_1"]
    lin = sr.RankRLS(alpha=1.0, solver="primal").fit(X, y, q)
    ker = sr.KernelRankRLS(kernel="linear", alpha=1.0).fit(X, y, q)
    np.testing.assert_allclose(ker.predict(X), X @ lin.coef_, rtol=1e-8, atol=1e-10)
    poly = sr.KernelRankRLS(kernel="poly", degree=2, coef0=0.0, alpha=1e-9).fit(X, y, q)
    assert np.all(np.isfinite(poly.predict(X)))


def test_indefinite_kernel_is_refused():
    with pytest.raises(ValueError, match="not positive semidefinite"):
        sr.KernelRankRLS(kernel=lambda A, B: -(A @ B.T)).fit(X0, Y0, Q0)


def test_float32_store_is_accumulated_in_float64(tmp_path):
    # large offset + small signal: a float32 accumulation of G would lose the signal
    rng = np.random.default_rng(1)
    X = (1e3 + rng.normal(size=(3000, 4))).astype(np.float32)
    q = np.repeat(np.arange(100), 30)
    y = X.astype(np.float64) @ np.array([1.0, -1.0, 0.5, 0.0]) + rng.normal(size=3000)
    s = sr.GroupStore.create(tmp_path / "s.zarr", 4)
    s.append(X, y, q)
    store = sr.GroupStore.open(tmp_path / "s.zarr")
    m = sr.RankRLS(alpha=1e-3, solver="primal").fit(store, max_rows=64)
    X64 = X.astype(np.float64)
    # G = XᵀLX by the group-centred formula in float64 (brute force of all pairs is O(m²) here)
    G = np.zeros((4, 4))
    b = np.zeros(4)
    for g in range(100):
        Xg, yg = X64[g * 30:(g + 1) * 30], y[g * 30:(g + 1) * 30]
        C = Xg - Xg.mean(axis=0)
        G += 30 * C.T @ C
        b += 30 * C.T @ (yg - yg.mean())
    w = np.linalg.solve(G + 1e-3 * np.eye(4), b)
    np.testing.assert_allclose(m.coef_, w, rtol=1e-8)


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_sgd_rankers_stay_finite_at_extreme_scales(scale):
    X, y, q = X0 * scale, Y0, Q0
    assert np.all(np.isfinite(sr.PairwiseSGDRanker().fit(X, y, q).coef_))
    m = sr.SparseSGDRanker(init="zeros").partial_fit(X, X, np.roll(X, 1, axis=0))
    assert np.all(np.isfinite(m.W_.data))
    assert np.all(np.isfinite(sr.KernelRankRLS(kernel="rbf").fit(X, y, q).predict(X)))


def test_metrics_on_tied_scores_are_the_expectation():
    y = np.array([2.0, 1.0, 0.0, 0.0])
    # constant scores: disagreement counts every ordered pair 1/2; NDCG is the mean over orders
    assert sr.metrics.disagreement(y, np.zeros(4)) == 0.5
    import itertools

    def dcg(order):
        return sum((2 ** y[i] - 1) / np.log2(r + 2) for r, i in enumerate(order))

    ideal = dcg(np.argsort(-y))
    mean = np.mean([dcg(p) / ideal for p in itertools.permutations(range(4))])
    assert sr.metrics.ndcg(y, np.zeros(4), k=None) == pytest.approx(mean, rel=1e-12)
