"""sample_weight in linear RankRLS (issue 23): weighted statistics against the brute-force all-pairs objective.

The reference never builds a Laplacian: it lists every counted pair (i, j) of a
group with weight s_g w_i w_j and target difference y_i - y_j, and solves the
ridge problem on the explicit pair differences by a dense solve.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from rankrls_testdata import make_groups

import streamrank as sr
from streamrank.io.weighted import with_weights
from streamrank.laplacian import apply_laplacian, group_weights
from streamrank.rankrls._statistics import RankStatistics, block_statistics


def brute_pairs(X, y, gp, w, group_weight="pair", ties="include"):
    """Rows of pair differences D, targets z and weights c of the weighted cost (21)."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X, float)
    Y = np.asarray(y, float).reshape(len(y), -1)
    s = group_weights(np.diff(gp), group_weight)
    D, Z, C = [], [], []
    for g in range(len(gp) - 1):
        for i in range(gp[g], gp[g + 1]):
            for j in range(i + 1, gp[g + 1]):
                if ties == "exclude" and Y[i, 0] == Y[j, 0]:
                    continue
                D.append(X[i] - X[j])
                Z.append(Y[i] - Y[j])
                C.append(s[g] * w[i] * w[j])
    n, v = X.shape[1], Y.shape[1]
    return (np.array(D).reshape(-1, n), np.array(Z).reshape(-1, v), np.array(C))


def brute_stats(X, y, gp, w, group_weight="pair", ties="include"):
    D, Z, C = brute_pairs(X, y, gp, w, group_weight, ties)
    return D.T @ (C[:, None] * D), D.T @ (C[:, None] * Z), (C[:, None] * Z * Z).sum(axis=0)


def brute_fit(X, y, gp, w, alpha, group_weight="pair", ties="include"):
    """argmin Σ_pairs c (z - d·θ)² + alpha |θ|² by a dense solve."""
    G, B, _ = brute_stats(X, y, gp, w, group_weight, ties)
    return np.linalg.solve(G + alpha * np.eye(G.shape[0]), B)


def weights(rng, m, zeros=True):
    w = rng.uniform(0.1, 3.0, size=m)
    if zeros:
        w[rng.random(m) < 0.15] = 0.0
    return w


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("kind", ["float64", "float32", "sparse"])
def test_weighted_statistics_equal_brute(gw, ties, kind, rng):
    X, y, qid, gp = make_groups(rng, n_groups=7, levels=3)
    w = weights(rng, len(y))
    if kind == "float32":
        X = X.astype(np.float32)
    if kind == "sparse":
        X[np.abs(X) < 0.7] = 0
        X = sp.csr_matrix(X)
    G, B, yLy = brute_stats(X, y, gp, w, gw, ties)
    tot = None
    for b in with_weights(sr.as_source(X, y, qid), w).blocks(max_rows=9, prefetch=False):
        part = block_statistics(b, group_weight=gw, ties=ties)
        tot = part if tot is None else tot.merge(part)
    np.testing.assert_allclose(tot.G, G, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(tot.B, B, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(tot.yLy, yLy, rtol=1e-10, atol=1e-9)
    assert tot.n_groups == 7 and tot.n_rows == len(y)


@settings(max_examples=30, deadline=None)
@given(max_rows=st.integers(9, 40), seed=st.integers(0, 10_000), ties=st.sampled_from(["include", "exclude"]),
       gw=st.sampled_from(["pair", "query", "size"]), shuffle=st.booleans(), zeros=st.booleans())
def test_weighted_rankrls_equals_brute_any_cutting(max_rows, seed, ties, gw, shuffle, zeros):
    """Any block cutting (whole groups), any block order: RankRLS equals the dense weighted all-pairs solve."""
    rng = np.random.default_rng(seed)
    X, y, qid, gp = make_groups(rng, n_groups=6, max_size=9, levels=3)
    w = weights(rng, len(y), zeros)
    alpha = 0.3
    ref = brute_fit(X, y, gp, w, alpha, gw, ties)[:, 0]
    src = with_weights(sr.as_source(X, y, qid), w)
    stats = RankStatistics(X.shape[1], 1, group_weight=gw, ties=ties)
    for b in src.blocks(max_rows=max_rows, shuffle=shuffle, random_state=seed, prefetch=False):
        stats.merge(block_statistics(b, group_weight=gw, ties=ties))
    m = sr.RankRLS(alpha=alpha, group_weight=gw, ties=ties)
    m.fit_statistics(stats, y_1d=True)
    np.testing.assert_allclose(m.coef_, ref, rtol=1e-8, atol=1e-10)
    fit = sr.RankRLS(alpha=alpha, group_weight=gw, ties=ties).fit(X, y, qid, sample_weight=w, max_rows=max_rows)
    np.testing.assert_allclose(fit.coef_, ref, rtol=1e-8, atol=1e-10)


def test_unit_weights_reproduce_unweighted(rng):
    """w ≡ 1 takes the weighted path and gives today's model to 1e-12."""
    X, y, qid, gp = make_groups(rng, n_groups=9, levels=4, n_features=5)
    for ties in ("include", "exclude"):
        for gw in ("pair", "query"):
            a = sr.RankRLS(alpha=0.5, ties=ties, group_weight=gw).fit(X, y, qid)
            b = sr.RankRLS(alpha=0.5, ties=ties, group_weight=gw).fit(X, y, qid, sample_weight=np.ones(len(y)))
            np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(b.stats_.G, a.stats_.G, rtol=1e-12, atol=1e-12)


def test_group_weights_as_row_weights(rng):
    """A per-group pair weight a_g is the row weight √a_g: equals duplicating nothing but scaling each group's cost."""
    X, y, qid, gp = make_groups(rng, n_groups=5, min_size=2)
    a = rng.uniform(0.2, 4.0, size=5)
    w = np.sqrt(np.repeat(a, np.diff(gp)))
    m = sr.RankRLS(alpha=0.2).fit(X, y, qid, sample_weight=w)
    # reference: G, B as the a_g-weighted sum of the unweighted per-group statistics
    G = sum(a[g] * sr.RankRLS(alpha=1).fit(X[gp[g]:gp[g + 1]], y[gp[g]:gp[g + 1]]).stats_.G for g in range(5))
    B = sum(a[g] * sr.RankRLS(alpha=1).fit(X[gp[g]:gp[g + 1]], y[gp[g]:gp[g + 1]]).stats_.B for g in range(5))
    np.testing.assert_allclose(m.coef_, np.linalg.solve(G + 0.2 * np.eye(4), B)[:, 0], rtol=1e-10)


def test_zero_weight_rows_drop_out(rng):
    """A row of weight 0 is in no pair: the model equals the fit without those rows."""
    X, y, qid, gp = make_groups(rng, n_groups=6, min_size=3)
    w = np.ones(len(y))
    w[gp[:-1]] = 0.0                       # the first row of every group
    keep = w > 0
    a = sr.RankRLS(alpha=0.1).fit(X, y, qid, sample_weight=w)
    b = sr.RankRLS(alpha=0.1).fit(X[keep], y[keep], qid[keep])
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_weighted_apply_laplacian_equals_pairs(ties, rng):
    X, y, qid, gp = make_groups(rng, n_groups=4, levels=2)
    w = weights(rng, len(y))
    U = rng.normal(size=(len(y), 3))
    LU = apply_laplacian(U, gp, y=y, ties=ties, weight=w)
    # Σ_pairs c (u_i - u_j)(e_i - e_j)
    ref = np.zeros_like(U)
    for g in range(len(gp) - 1):
        for i in range(gp[g], gp[g + 1]):
            for j in range(i + 1, gp[g + 1]):
                if ties == "exclude" and y[i] == y[j]:
                    continue
                ref[i] += w[i] * w[j] * (U[i] - U[j])
                ref[j] -= w[i] * w[j] * (U[i] - U[j])
    np.testing.assert_allclose(LU, ref, rtol=1e-12, atol=1e-12)


def test_weighted_paths_partial_fit_cv_lqo(rng):
    """λ path, partial_fit, k-fold CV and leave-query-out keep working with weights (against refits)."""
    X, y, qid, gp = make_groups(rng, n_groups=12, levels=3, min_size=2)
    w = weights(rng, len(y), zeros=False)
    alphas = [0.1, 1.0, 10.0]
    m = sr.RankRLS(alpha=1.0).fit(X, y, qid, sample_weight=w)
    P = m.path(alphas)
    for a, Pa in zip(alphas, P):
        np.testing.assert_allclose(Pa, brute_fit(X, y, gp, w, a)[:, 0], rtol=1e-8)
    # partial_fit in two calls == fit on everything
    half = int(gp[6])
    p = sr.RankRLS(alpha=1.0).partial_fit(X[:half], y[:half], qid[:half], sample_weight=w[:half])
    p.partial_fit(X[half:], y[half:], qid[half:], sample_weight=w[half:])
    np.testing.assert_allclose(p.coef_, m.coef_, rtol=1e-10)
    # leave-query-out == refit without the group (weights kept)
    lqo = m.leave_query_out()
    for g in (0, 5, 11):
        keep = np.ones(len(y), bool)
        keep[gp[g]:gp[g + 1]] = False
        r = sr.RankRLS(alpha=1.0).fit(X[keep], y[keep], qid[keep], sample_weight=w[keep])
        np.testing.assert_allclose(lqo[gp[g]:gp[g + 1]], X[gp[g]:gp[g + 1]] @ r.coef_, rtol=1e-8, atol=1e-10)
    # k-fold CV: squared loss per fold equals the brute weighted held-out loss of the refit without the fold
    from streamrank.rankrls.selection import fold_of

    cv = sr.RankRLS(alpha=1.0).cross_validate(with_weights(sr.as_source(X, y, qid), w), alphas=alphas, folds=3)
    fold = fold_of(np.unique(qid), 3)
    fold_row = np.repeat(fold, np.diff(gp))
    num = np.zeros(len(alphas))
    den = 0
    for f in range(3):
        tr, te = fold_row != f, fold_row == f
        gte = np.concatenate(([0], np.cumsum(np.diff(gp)[fold == f])))
        D, Z, C = brute_pairs(X[te], y[te], gte, w[te])
        den += len(C)
        for i, a in enumerate(alphas):
            gtr = np.concatenate(([0], np.cumsum(np.diff(gp)[fold != f])))
            th = brute_fit(X[tr], y[tr], gtr, w[tr], a)[:, 0]
            num[i] += (C * (Z[:, 0] - D @ th) ** 2).sum()
    np.testing.assert_allclose(cv.scores, num / den, rtol=1e-8)


def test_bad_sample_weight_is_refused(rng):
    X, y, qid, gp = make_groups(rng, n_groups=3, min_size=2)
    w = np.ones(len(y))
    with pytest.raises(ValueError, match="one weight per row"):
        sr.RankRLS().fit(X, y, qid, sample_weight=w[:-1])
    w[2] = -1.0
    with pytest.raises(ValueError, match=r"sample_weight\[2\] = -1.0"):
        sr.RankRLS().fit(X, y, qid, sample_weight=w)
    w[2] = np.nan
    with pytest.raises(ValueError, match=r"sample_weight\[2\]"):
        sr.RankRLS().fit(X, y, qid, sample_weight=w)
    # cg with a weighted group split across blocks: tests/rankrls/test_cg_weighted_split.py (equal to the primal)
    cg = sr.RankRLS(solver="cg", tol=1e-12).fit(X, y, None, sample_weight=np.ones(len(y)), max_rows=5)
    np.testing.assert_allclose(cg.coef_, sr.RankRLS(solver="primal").fit(X, y, None).coef_, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_weighted_sparse_kernel_rankrls_equals_closed_form(ties, rng):
    """Sparse KernelRankRLS with weights: (K_RM L_w K_MR + λ K_RR)⁻¹ K_RM L_w y, L_w built pair by pair."""
    X, y, qid, gp = make_groups(rng, n_groups=8, n_features=3, levels=3)
    w = weights(rng, len(y))
    m = sr.KernelRankRLS(kernel="rbf", gamma=0.5, alpha=0.3, n_basis=7, random_state=2, ties=ties)
    m.fit(with_weights(sr.as_source(X, y, qid), w), max_rows=9)
    R = m.basis_
    K_RM = np.exp(-0.5 * ((R[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    K_RR = np.exp(-0.5 * ((R[:, None, :] - R[None, :, :]) ** 2).sum(-1))
    L = np.zeros((len(y), len(y)))
    for g in range(len(gp) - 1):
        for i in range(gp[g], gp[g + 1]):
            for j in range(i + 1, gp[g + 1]):
                if ties == "exclude" and y[i] == y[j]:
                    continue
                e = np.zeros(len(y))
                e[i], e[j] = 1.0, -1.0
                L += w[i] * w[j] * np.outer(e, e)
    ref = np.linalg.solve(K_RM @ L @ K_RM.T + 0.3 * K_RR, K_RM @ L @ y)
    np.testing.assert_allclose(np.ravel(m.dual_coef_), ref, rtol=1e-8, atol=1e-10)
    # the exact dual takes the weights too: tests/rankrls/test_kernel_dual_weights.py


def test_learners_without_weights_refuse_them(rng):
    X, y, qid, gp = make_groups(rng, n_groups=4, min_size=2)
    src = with_weights(sr.as_source(X, y, qid), np.ones(len(y)))
    # PairwiseSGDRanker takes row weights now (tests/sgd/test_sgd_pairwise_weights.py): weights 1 = no weights
    np.testing.assert_array_equal(sr.PairwiseSGDRanker().fit(src).coef_,
                                  sr.PairwiseSGDRanker().fit(X, y, qid).coef_)
    with pytest.raises(ValueError, match="zero on every row"):
        sr.RankRLS().fit(X, y, qid, sample_weight=np.zeros(len(y)))


@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("sparse", [False, True])
def test_weighted_cg_equals_primal(ties, sparse, rng):
    """solver='cg' with weights: L_w applied per block (O(rows)), weighted Jacobi diagonal; == the primal solve."""
    from streamrank.rankrls.cg import gram_diagonal

    X, y, qid, gp = make_groups(rng, n_groups=9, n_features=6, levels=3)
    w = weights(rng, len(y))
    Xs = X
    if sparse:
        X[np.abs(X) < 0.5] = 0
        Xs = sp.csr_matrix(X)
    ref = brute_fit(X, y, gp, w, 0.4, ties=ties)[:, 0]
    m = sr.RankRLS(alpha=0.4, solver="cg", ties=ties, tol=1e-13, max_iter=500).fit(Xs, y, qid, sample_weight=w,
                                                                                   max_rows=10)
    np.testing.assert_allclose(m.coef_, ref, rtol=1e-8, atol=1e-10)
    G, _, _ = brute_stats(X, y, gp, w, ties=ties)
    diag = gram_diagonal(with_weights(sr.as_source(Xs, y, qid), w), ties=ties, max_rows=10)
    np.testing.assert_allclose(diag, np.diag(G), rtol=1e-10, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(max_rows=st.integers(1, 12), seed=st.integers(0, 10_000), ties=st.sampled_from(["include", "exclude"]),
       gw=st.sampled_from(["pair", "query", "size"]), global_group=st.booleans(), shuffle=st.booleans(),
       sparse=st.booleans())
def test_weighted_split_groups_any_cutting_any_order(max_rows, seed, ties, gw, global_group, shuffle, sparse):
    """Groups cut into pieces (split_groups), pieces in any order and in separate statistics joined by merge."""
    rng = np.random.default_rng(seed)
    X, y, qid, gp = make_groups(rng, n_groups=4, max_size=9, levels=3)
    if global_group:
        qid, gp = None, np.array([0, len(y)])
    w = weights(rng, len(y))
    G, B, yLy = brute_stats(X, y, gp, w, gw, ties)
    Xs = sp.csr_matrix(np.where(np.abs(X) < 0.5, 0.0, X)) if sparse else X
    if sparse:
        G, B, yLy = brute_stats(Xs, y, gp, w, gw, ties)
    src = with_weights(sr.as_source(Xs, y, qid), w)
    parts = [block_statistics(b, group_weight=gw, ties=ties)
             for b in src.blocks(max_rows=max_rows, shuffle=shuffle, random_state=seed, split_groups=True,
                                 prefetch=False)]
    tot = parts[0].copy()
    for p in parts[1:]:
        tot.merge(p)
    assert tot.is_complete
    np.testing.assert_allclose(tot.G, G, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(tot.B, B, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(tot.yLy, yLy, rtol=1e-9, atol=1e-9)
    if not sparse:
        m = sr.RankRLS(alpha=0.3, group_weight=gw, ties=ties).fit(X, y, qid, sample_weight=w, max_rows=max_rows)
        np.testing.assert_allclose(m.coef_, brute_fit(X, y, gp, w, 0.3, gw, ties)[:, 0], rtol=1e-8, atol=1e-10)
