"""cg RankRLS with row weights on groups cut across blocks (one global group, or groups larger than max_rows):
the open sums S_g = Σ_p X_pᵀ w_p, t_g = Σ_p w_pᵀ u_p plus the whole group's weight W_g give the exact
weighted Laplacian product, Jacobi diagonal and held-out loss — checked against dense L_w built pair by pair."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io.weighted import with_weights
from streamrank.rankrls.cg import gram_diagonal, laplacian_pass, validation_loss


def _data(seed, sizes, n=5, sparse=False):
    rng = np.random.default_rng(seed)
    m = int(sum(sizes))
    X = rng.normal(size=(m, n))
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
        X = sp.csr_matrix(X)
    y = rng.integers(0, 4, size=m).astype(float)
    qid = np.repeat(np.arange(len(sizes)), sizes)
    w = rng.uniform(0.1, 3.0, size=m)
    w[rng.random(m) < 0.15] = 0.0
    return X, y, qid, w


def _L(qid, w, gw="pair"):
    """Σ_g s_g Σ_{i<j in g} w_i w_j (e_i − e_j)(e_i − e_j)ᵀ."""
    m = len(qid)
    L = np.zeros((m, m))
    for q in np.unique(qid):
        rows = np.flatnonzero(qid == q)
        n_g = len(rows)
        s = {"pair": 1.0, "query": 2.0 / max(n_g * (n_g - 1), 1), "size": 1.0 / n_g}[gw]
        for a in range(n_g):
            for b in range(a + 1, n_g):
                i, j = rows[a], rows[b]
                e = np.zeros(m)
                e[i], e[j] = 1.0, -1.0
                L += s * w[i] * w[j] * np.outer(e, e)
    return L


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("gw", ["pair", "query", "size"])
def test_weighted_pieces_pass_diagonal_and_loss_equal_dense(sparse, gw):
    X, y, qid, w = _data(1, [23, 3, 17], sparse=sparse)
    src = with_weights(sr.as_source(X, y, qid), w)
    Xd = X.toarray() if sparse else X
    L = _L(qid, w, gw)
    V = np.random.default_rng(2).normal(size=(5, 2))
    for max_rows in (4, 7, 50):                      # groups cut into pieces, and whole
        np.testing.assert_allclose(laplacian_pass(src, V, group_weight=gw, max_rows=max_rows), Xd.T @ L @ Xd @ V,
                                   rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(laplacian_pass(src, None, group_weight=gw, max_rows=max_rows)[:, 0],
                                   Xd.T @ L @ y, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(gram_diagonal(src, group_weight=gw, max_rows=max_rows), np.diag(Xd.T @ L @ Xd),
                                   rtol=1e-10, atol=1e-10)
        r = y - Xd @ V[:, 0]
        np.testing.assert_allclose(validation_loss(src, V[:, 0], group_weight=gw, max_rows=max_rows)[0], r @ L @ r,
                                   rtol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_weighted_cg_on_one_global_group_equals_dense_solve(sparse):
    X, y, _, w = _data(3, [60], sparse=sparse)
    Xd = X.toarray() if sparse else X
    cg = sr.RankRLS(solver="cg", alpha=0.7, tol=1e-13, max_iter=200).fit(X, y, None, sample_weight=w, max_rows=9)
    L = _L(np.zeros(len(y)), w)
    ref = np.linalg.solve(Xd.T @ L @ Xd + 0.7 * np.eye(5), Xd.T @ L @ y)
    np.testing.assert_allclose(cg.coef_, ref, rtol=1e-8, atol=1e-10)
    primal = sr.RankRLS(solver="primal", alpha=0.7).fit(Xd, y, None, sample_weight=w, max_rows=9)
    np.testing.assert_allclose(cg.coef_, primal.coef_, rtol=1e-8, atol=1e-10)
    plain = sr.RankRLS(solver="cg", alpha=0.7, tol=1e-13).fit(X, y, None, max_rows=9)
    assert np.abs(plain.coef_ - cg.coef_).max() > 1e-3


def test_weighted_cg_cross_validation_with_split_groups_equals_primal():
    """k-fold CV of weighted cg (folds keep their rows' weights, pieces included) = the weighted primal's CV."""
    X, y, qid, w = _data(4, [14, 3, 9, 12, 4, 16, 5, 11])
    src = with_weights(sr.as_source(X, y, qid), w)
    alphas = [0.1, 1.0, 10.0]
    a = sr.RankRLS(solver="cg", tol=1e-13, max_iter=200).cross_validate(src, alphas=alphas, folds=3, max_rows=6)
    b = sr.RankRLS(solver="primal").cross_validate(src, alphas=alphas, folds=3)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-7)
    # a fold that keeps only some groups of a block keeps their weights (it dropped them)
    c = sr.RankRLS(solver="cg", tol=1e-13, max_iter=200).cross_validate(src, alphas=alphas, folds=3, max_rows=40)
    np.testing.assert_allclose(c.scores, b.scores, rtol=1e-7)
