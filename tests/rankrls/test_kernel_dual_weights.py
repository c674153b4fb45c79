"""Exact dual KernelRankRLS with row weights (issue 23): A = (L_w K + λI)⁻¹ L_w y with L_w built pair by pair
(weight w_i w_j, times the group weight s_g), dense solve, 1e-8; leave-query-out = refits without each query;
path, CV and save/load keep the weights."""
from __future__ import annotations

import numpy as np
import pytest
from rankrls_testdata import make_groups

import streamrank as sr
from streamrank.io.weighted import with_weights
from streamrank.laplacian import group_weights


def _weights(rng, m):
    w = rng.uniform(0.1, 3.0, size=m)
    w[rng.random(m) < 0.15] = 0.0                        # zero weights: rows that take part in no pair
    return w


def _pair_laplacian(y, gp, w, ties, gw):
    """Σ_g s_g Σ_{i<j in g} w_i w_j (e_i − e_j)(e_i − e_j)ᵀ, ties skipped with ties='exclude'."""
    m = len(y)
    s = group_weights(np.diff(gp), gw)
    L = np.zeros((m, m))
    for g in range(len(gp) - 1):
        for i in range(gp[g], gp[g + 1]):
            for j in range(i + 1, gp[g + 1]):
                if ties == "exclude" and y[i] == y[j]:
                    continue
                e = np.zeros(m)
                e[i], e[j] = 1.0, -1.0
                L += s[g] * w[i] * w[j] * np.outer(e, e)
    return L


def _rbf(A, B, gamma):
    return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_weighted_dual_equals_brute_force(ties, gw):
    rng = np.random.default_rng(11)
    X, y, qid, gp = make_groups(rng, n_groups=7, n_features=3, levels=3, min_size=2)
    w = _weights(rng, len(y))
    args = dict(kernel="rbf", gamma=0.4, alpha=0.3, ties=ties, group_weight=gw)
    m = sr.KernelRankRLS(**args).fit(with_weights(sr.as_source(X, y, qid), w))
    K = _rbf(X, X, 0.4)
    L = _pair_laplacian(y, gp, w, ties, gw)
    ref = np.linalg.solve(L @ K + 0.3 * np.eye(len(y)), L @ y)
    np.testing.assert_allclose(m.dual_coef_, ref, rtol=1e-8, atol=1e-10)
    Xt = rng.normal(size=(9, 3))
    np.testing.assert_allclose(m.predict(Xt), _rbf(Xt, X, 0.4) @ ref, rtol=1e-8, atol=1e-10)
    # the path from the one decomposition, every alpha
    for a, A in zip([0.01, 1.0, 50.0], m.path([0.01, 1.0, 50.0])):
        np.testing.assert_allclose(A, np.linalg.solve(L @ K + a * np.eye(len(y)), L @ y), rtol=1e-7, atol=1e-9)
    # the weights changed the model
    plain = sr.KernelRankRLS(**args).fit(X, y, qid)
    assert np.abs(plain.dual_coef_ - m.dual_coef_).max() > 1e-3


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_weighted_dual_leave_query_out_equals_refits(ties, tmp_path):
    rng = np.random.default_rng(12)
    X, y, qid, gp = make_groups(rng, n_groups=6, n_features=3, levels=3, min_size=2)
    w = _weights(rng, len(y))
    args = dict(kernel="rbf", gamma=0.4, alpha=0.5, ties=ties)
    m = sr.KernelRankRLS(**args).fit(with_weights(sr.as_source(X, y, qid), w))
    lqo = m.leave_query_out()
    for g in range(len(gp) - 1):
        keep = np.r_[0:gp[g], gp[g + 1]:len(y)]
        r = sr.KernelRankRLS(**args).fit(with_weights(sr.as_source(X[keep], y[keep], qid[keep]), w[keep]))
        np.testing.assert_allclose(lqo[gp[g]:gp[g + 1]], r.predict(X[gp[g]:gp[g + 1]]), rtol=1e-7, atol=1e-9)
    # saved and loaded: the weights come back, so the path and the hold-outs do too
    sr.save(m, tmp_path / "k.zarr")
    back = sr.load(tmp_path / "k.zarr")
    np.testing.assert_allclose(back.path([0.1, 2.0]), m.path([0.1, 2.0]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(back.leave_query_out(), lqo, rtol=1e-10, atol=1e-12)


def test_weighted_dual_cross_validation_and_refusals():
    rng = np.random.default_rng(13)
    X, y, qid, gp = make_groups(rng, n_groups=9, n_features=3, levels=3, min_size=2)
    w = _weights(rng, len(y))
    m = sr.KernelRankRLS(kernel="rbf", gamma=0.4, alpha=0.5).fit(with_weights(sr.as_source(X, y, qid), w))
    res = m.cross_validate(alphas=[0.1, 1.0, 10.0], folds="query")
    lqo = m.leave_query_out(alpha=1.0)
    L = _pair_laplacian(y, gp, w, "include", "pair")
    sizes = np.diff(gp)
    n_pairs = int((sizes * (sizes - 1) // 2).sum())
    np.testing.assert_allclose(res.scores[1], (y - lqo) @ L @ (y - lqo) / n_pairs, rtol=1e-8)
    one = sr.KernelRankRLS(kernel="rbf", gamma=0.4).fit(with_weights(sr.as_source(X, y, None), w))
    with pytest.raises(NotImplementedError, match="leave_pair_out with row weights"):
        one.leave_pair_out(np.array([[0, 1]]))
