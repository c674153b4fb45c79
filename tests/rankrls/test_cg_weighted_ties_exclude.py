"""cg RankRLS with row weights and ties="exclude" on groups cut across blocks (issue 23).

The brute force: the weighted all-pairs objective with the tied pairs dropped,
Σ_g s_g Σ_{i<j in g, y_i ≠ y_j} w_i w_j ((y_i − y_j) − (f_i − f_j))², as a dense L built pair by pair,
solved densely.  The streaming pass keeps W_c per tie class and the weighted class sums
(:mod:`streamrank.rankrls._split_groups`); any block cutting must give the same numbers.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.io.weighted import with_weights
from streamrank.rankrls._split_groups import TieTable
from streamrank.rankrls.cg import gram_diagonal, laplacian_pass, validation_loss


def _L_untied(qid, y, w, gw="pair"):
    """Σ_g s_g Σ_{i<j in g, y_i != y_j} w_i w_j (e_i − e_j)(e_i − e_j)ᵀ, pair by pair."""
    m = len(qid)
    L = np.zeros((m, m))
    for q in np.unique(qid):
        rows = np.flatnonzero(qid == q)
        n_g = len(rows)
        s = {"pair": 1.0, "query": 2.0 / max(n_g * (n_g - 1), 1), "size": 1.0 / n_g}[gw]
        for a in range(n_g):
            for b in range(a + 1, n_g):
                i, j = rows[a], rows[b]
                if y[i] == y[j]:
                    continue
                L[i, i] += s * w[i] * w[j]
                L[j, j] += s * w[i] * w[j]
                L[i, j] -= s * w[i] * w[j]
                L[j, i] -= s * w[i] * w[j]
    return L


def _data(seed, sizes, n=4, levels=3, sparse=False, zero_frac=0.15):
    rng = np.random.default_rng(seed)
    m = int(sum(sizes))
    X = rng.normal(size=(m, n))
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    y = rng.integers(0, levels, size=m).astype(float)
    qid = np.repeat(np.arange(len(sizes)), sizes)
    w = rng.uniform(0.1, 3.0, size=m)
    w[rng.random(m) < zero_frac] = 0.0
    if not w.any():     # all-zero weights are refused up front (io.weighted); keep one row weighted
        w[0] = 1.0
    return (sp.csr_matrix(X) if sparse else X), X, y, qid, w


# 25 hypothesis cuttings: 2.0 s wall under load 7; the quick loop keeps the fits against the dense solve below
@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(1, 19), min_size=1, max_size=4),
       max_rows=st.integers(2, 12), gw=st.sampled_from(["pair", "query", "size"]),
       levels=st.integers(1, 4), sparse=st.booleans(), cached=st.booleans())
@example(seed=307, sizes=[1], max_rows=2, gw="pair", levels=1, sparse=False, cached=True)  # all weights drawn 0
def test_weighted_exclude_pass_diagonal_loss_equal_dense_for_any_cutting(seed, sizes, max_rows, gw, levels, sparse,
                                                                         cached):
    """X^T L X V, X^T L y, diag(X^T L X) and r^T L r on pieces = the dense L with tied pairs dropped (1e-10);
    ``cached=False``: class sums not cached, the second sweep over the pieces."""
    Xin, X, y, qid, w = _data(seed, sizes, levels=levels, sparse=sparse)
    src = with_weights(sr.as_source(Xin, y, qid), w)
    L = _L_untied(qid, y, w, gw)
    V = np.random.default_rng(seed + 1).normal(size=(X.shape[1], 2))
    table = TieTable.for_source(src, max_rows, cache_entries=None if cached else 0)
    if table is not None:
        assert table.weighted
    kw = dict(group_weight=gw, ties="exclude", max_rows=max_rows, ties_table=table)
    np.testing.assert_allclose(laplacian_pass(src, V, **kw), X.T @ L @ X @ V, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(laplacian_pass(src, None, **kw)[:, 0], X.T @ L @ y, rtol=1e-10, atol=1e-10)
    r = y - X @ V[:, 0]
    np.testing.assert_allclose(validation_loss(src, V[:, 0], **kw)[0], r @ L @ r, rtol=1e-10, atol=1e-10)
    diag = gram_diagonal(src, **kw)
    if table is None or table.cached:       # exact diagonal
        np.testing.assert_allclose(diag, np.diag(X.T @ L @ X), rtol=1e-10, atol=1e-10)
    else:                                   # documented: the non-negative class term is left out
        assert np.all(diag <= np.diag(X.T @ L @ X) + 1e-9)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(2, 25), min_size=1, max_size=3),
       max_rows=st.integers(3, 15), gw=st.sampled_from(["pair", "query", "size"]),
       weighting=st.sampled_from(["rows", "groups", "ones", "zeros-in-groups"]))
def test_weighted_exclude_cg_fit_equals_dense_solve(seed, sizes, max_rows, gw, weighting):
    """RankRLS(solver="cg", ties="exclude").fit(sample_weight=w) on cut groups = the dense solve of the
    brute-force objective (1e-8), for per-row and per-group (w_i = √a_g) weights; = the weighted primal."""
    _, X, y, qid, w = _data(seed, sizes, zero_frac=0.0)
    rng = np.random.default_rng(seed + 7)
    if weighting == "groups":
        a = rng.uniform(0.2, 4.0, size=len(sizes))
        w = np.sqrt(a)[qid]
    elif weighting == "ones":
        w = np.ones(len(y))
    elif weighting == "zeros-in-groups":
        w[rng.random(len(w)) < 0.3] = 0.0
        if not w.any():
            w[0] = 1.0
    L = _L_untied(qid, y, w, gw)
    alpha = 0.6
    ref = np.linalg.solve(X.T @ L @ X + alpha * np.eye(X.shape[1]), X.T @ L @ y)
    cg = sr.RankRLS(solver="cg", alpha=alpha, ties="exclude", group_weight=gw, tol=1e-14, max_iter=500).fit(
        X, y, qid, sample_weight=w, max_rows=max_rows)
    np.testing.assert_allclose(cg.coef_, ref, rtol=1e-8, atol=1e-10)
    primal = sr.RankRLS(solver="primal", alpha=alpha, ties="exclude", group_weight=gw).fit(
        X, y, qid, sample_weight=w, max_rows=max_rows)
    np.testing.assert_allclose(cg.coef_, primal.coef_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_weighted_exclude_on_one_global_group(sparse):
    """qid=None (one group of 60 rows cut in pieces of 7): cg = dense solve; the weights matter; w ≡ 1 = unweighted."""
    Xin, X, y, _, w = _data(3, [60], sparse=sparse)
    L = _L_untied(np.zeros(len(y)), y, w)
    ref = np.linalg.solve(X.T @ L @ X + 0.7 * np.eye(X.shape[1]), X.T @ L @ y)
    args = dict(solver="cg", alpha=0.7, ties="exclude", tol=1e-14, max_iter=300)
    cg = sr.RankRLS(**args).fit(Xin, y, None, sample_weight=w, max_rows=7)
    np.testing.assert_allclose(cg.coef_, ref, rtol=1e-8, atol=1e-10)
    plain = sr.RankRLS(**args).fit(Xin, y, None, max_rows=7)
    assert np.abs(plain.coef_ - cg.coef_).max() > 1e-3
    ones = sr.RankRLS(**args).fit(Xin, y, None, sample_weight=np.ones(len(y)), max_rows=7)
    np.testing.assert_allclose(ones.coef_, plain.coef_, rtol=1e-9, atol=1e-12)


def test_weighted_exclude_cg_cross_validation_equals_primal():
    """k-fold CV of weighted cg with ties excluded on pieces = the weighted primal's CV (same folds, same pairs)."""
    _, X, y, qid, w = _data(4, [14, 3, 9, 12, 4, 16, 5, 11])
    src = with_weights(sr.as_source(X, y, qid), w)
    alphas = [0.1, 1.0, 10.0]
    a = sr.RankRLS(solver="cg", ties="exclude", tol=1e-13, max_iter=300).cross_validate(
        src, alphas=alphas, folds=3, max_rows=6)
    b = sr.RankRLS(solver="primal", ties="exclude").cross_validate(src, alphas=alphas, folds=3)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-7)


def test_ips_clicks_on_one_global_group_equal_the_edge_list():
    """The click use case on a group cut in pieces: ips_weights + ties='exclude' with cg = fit_edges on the
    explicit (clicked, not clicked) edges weighted 1/p(pos) (1e-8)."""
    from streamrank.clicks import ips_edges, ips_weights

    rng = np.random.default_rng(11)
    X = rng.normal(size=(50, 4))
    clicks = (rng.random(50) < 0.3).astype(float)
    position = rng.integers(1, 11, size=50)
    p = 1.0 / np.arange(1, 11)
    w = ips_weights(clicks, position, p)
    cg = sr.RankRLS(solver="cg", alpha=0.4, ties="exclude", tol=1e-14, max_iter=300).fit(
        X, clicks, None, sample_weight=w, max_rows=8)
    E, W = ips_edges(clicks, np.zeros(50), position, p)
    ref = sr.RankRLS(alpha=0.4).fit_edges(X, E, weights=W)
    np.testing.assert_allclose(cg.coef_, ref.coef_, rtol=1e-8, atol=1e-10)


def test_tie_table_refuses_mixed_weighting():
    """A weighted piece against a table built from unweighted pieces is an error, not a wrong product."""
    _, X, y, _, w = _data(5, [30])
    plain = sr.as_source(X, y, None)
    table = TieTable.for_source(plain, 7)
    with pytest.raises(ValueError, match="row-weighted"):
        laplacian_pass(with_weights(plain, w), None, ties="exclude", max_rows=7, ties_table=table)
