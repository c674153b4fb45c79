"""Sparse (basis-vector) RankRLS: == dual with all rows, == dense closed form, block-cutting invariant."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from rankrls_testdata import make_groups
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_reference import groups_of, kernel_ref, laplacian_pairs, sparse_ref

import streamrank as sr


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300)


@pytest.mark.parametrize("group_weight,ties", [("pair", "include"), ("query", "exclude"), ("size", "include")])
def test_sparse_with_all_rows_equals_dual(rng, group_weight, ties):
    X, y, qid, _ = make_groups(rng, n_groups=6, n_features=3, levels=3)
    kw = dict(kernel="rbf", gamma=0.5, alpha=0.2, group_weight=group_weight, ties=ties)
    dual = sr.KernelRankRLS(**kw).fit(X, y, qid)
    sparse = sr.KernelRankRLS(n_basis=len(y), basis=X, **kw).fit(X, y, qid)
    assert _rel(sparse.dual_coef_, dual.dual_coef_) < 1e-8
    Xt = rng.normal(size=(5, 3))
    assert _rel(sparse.predict(Xt), dual.predict(Xt)) < 1e-8
    assert _rel(sparse.path([0.01, 5.0]), dual.path([0.01, 5.0])) < 1e-8
    assert _rel(sparse.leave_query_out(), dual.leave_query_out()) < 1e-8
    # a random basis of all rows is a permutation of the rows: same function
    perm = sr.KernelRankRLS(n_basis=len(y), random_state=1, **kw).fit(X, y, qid)
    assert _rel(perm.predict(Xt), dual.predict(Xt)) < 1e-8


@pytest.mark.parametrize("kernel,params", [("rbf", dict(gamma=0.3)), ("poly", dict(degree=2, coef0=1.0))])
@pytest.mark.parametrize("group_weight", ["pair", "query"])
def test_sparse_equals_closed_form(rng, kernel, params, group_weight):
    X, y, qid, _ = make_groups(rng, n_groups=7, n_features=3, n_outputs=2)
    m = sr.KernelRankRLS(kernel=kernel, alpha=0.4, n_basis=6, random_state=5, group_weight=group_weight,
                         **params).fit(X, y, qid)
    R = m.basis_
    assert R.shape == (6, 3)
    # every basis row is a training row
    assert all(np.any(np.all(X == r, axis=1)) for r in R)
    L = laplacian_pairs(qid, None, group_weight)
    for lam, A in zip([0.4, 0.05, 7.0], [m.dual_coef_, *m.path([0.05, 7.0])]):
        ref = sparse_ref(kernel_ref(R, X, kernel, **params), kernel_ref(R, R, kernel, **params), L, y, lam)
        assert _rel(A, ref) < 1e-8


@pytest.mark.parametrize("kernel,params", [("rbf", dict(gamma=0.3)), ("poly", dict(degree=2, coef0=1.0)),
                                           ("linear", {})])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_sparse_piecewise_kernel_columns_equal_closed_form(rng, kernel, params, threads, ties, monkeypatch):
    """Φ = k(X_B, X_R) computed a few groups at a time (one or two threads) still gives the closed form."""
    import streamrank.rankrls._accumulate_threads as threads_mod

    X, y, qid, _ = make_groups(rng, n_groups=15, n_features=8, levels=3)   # 8 > 6: linear K_RR has full rank
    monkeypatch.setattr(threads_mod, "FILL_CHUNK_BYTES", 8 * 7 * 5)     # ~5 rows a piece (r = 6 basis rows)
    monkeypatch.setattr(threads_mod, "_THREADS", [threads])
    m = sr.KernelRankRLS(kernel=kernel, alpha=0.4, n_basis=6, random_state=5, ties=ties, **params)
    m.fit(sr.as_source(X, y, qid), max_rows=40)
    R = m.basis_
    L = laplacian_pairs(qid, y, "pair", ties=ties)
    ref = sparse_ref(kernel_ref(R, X, kernel, **params), kernel_ref(R, R, kernel, **params), L, y, 0.4)
    assert _rel(m.dual_coef_, ref) < 1e-8


@pytest.mark.parametrize("group_weight", ["pair", "query", "size"])
def test_sparse_ties_excluded_several_outputs(rng, group_weight, tmp_path):
    """ties="exclude", two outputs: one G per output.  Each column equals the closed form with its own
    Laplacian and the single-output model of that column (fit, path, leave-query-out, k-fold CV, save/load),
    whatever the block cutting."""
    X, _, qid, _ = make_groups(rng, n_groups=12, n_features=3, levels=3)
    Y = np.column_stack([rng.integers(0, 3, len(qid)), rng.integers(0, 2, len(qid))]).astype(float)
    kw = dict(kernel="rbf", gamma=0.5, alpha=0.4, n_basis=7, random_state=3, group_weight=group_weight,
              ties="exclude")
    m = sr.KernelRankRLS(**kw).fit(sr.as_source(X, Y, qid), max_rows=13)
    R = m.basis_
    K_RM, K_RR = kernel_ref(R, X, "rbf", gamma=0.5), kernel_ref(R, R, "rbf", gamma=0.5)
    singles = [sr.KernelRankRLS(**kw).fit(sr.as_source(X, Y[:, k], qid), max_rows=40) for k in range(2)]
    for k in range(2):
        L = laplacian_pairs(qid, Y[:, k], group_weight, ties="exclude")
        assert _rel(m.dual_coef_[:, k], sparse_ref(K_RM, K_RR, L, Y[:, k], 0.4)) < 1e-8
        assert _rel(m.path([3.0])[0][:, k], sparse_ref(K_RM, K_RR, L, Y[:, k], 3.0)) < 1e-8
        np.testing.assert_array_equal(singles[k].basis_, R)
    lqo = m.leave_query_out()
    for k in range(2):
        assert _rel(lqo[:, k], singles[k].leave_query_out()) < 1e-8
    cv = m.cross_validate(alphas=[0.1, 2.0], folds=3, scoring="squared")
    for k in range(2):
        one = singles[k].cross_validate(alphas=[0.1, 2.0], folds=3, scoring="squared")
        assert _rel(cv.scores_per_output[:, k], one.scores_per_output[:, 0]) < 1e-8
    sr.save(m, tmp_path / "m")
    loaded = sr.load(tmp_path / "m")
    assert _rel(loaded.path([0.2, 5.0]), m.path([0.2, 5.0])) < 1e-10


def test_sparse_leave_query_out_equals_retraining(rng):
    X, y, qid, _ = make_groups(rng, n_groups=6, n_features=3, levels=4)
    R = X[[0, 3, 5, 9, 11]]
    m = sr.KernelRankRLS(gamma=0.6, alpha=0.3, basis=R, ties="exclude").fit(X, y, qid)
    lqo = m.leave_query_out()
    K_RR = kernel_ref(R, R, "rbf", gamma=0.6)
    for U in groups_of(qid):
        keep = np.setdiff1d(np.arange(len(y)), U)
        L = laplacian_pairs(qid[keep], y[keep], "pair", "exclude")
        A = sparse_ref(kernel_ref(R, X[keep], "rbf", gamma=0.6), K_RR, L, y[keep], 0.3)
        assert _rel(lqo[U], kernel_ref(X[U], R, "rbf", gamma=0.6) @ A) < 1e-8
    res = m.cross_validate(None, [0.3, 1.0], folds="query")
    assert _rel(m.cv_predictions_[0], lqo) < 1e-12 and res.best_alpha in (0.3, 1.0)


@pytest.mark.parametrize("scoring", ["squared", "disagreement"])
def test_sparse_kfold_cross_validation_equals_retraining(rng, scoring):
    from streamrank.rankrls.selection import fold_of
    from streamrank import metrics

    X, y, qid, _ = make_groups(rng, n_groups=9, n_features=3, levels=3, min_size=2)
    R = X[[0, 4, 8, 12]]
    alphas = [0.05, 1.0, 20.0]
    m = sr.KernelRankRLS(gamma=0.4, basis=R).fit(sr.as_source(X, y, qid), max_rows=7)
    res = m.cross_validate(None, alphas, folds=3, scoring=scoring)
    gq = np.unique(qid)
    fog = dict(zip(gq.tolist(), fold_of(gq, 3).tolist()))
    rf = np.array([fog[q] for q in qid])
    L_all = laplacian_pairs(qid, None, "pair")
    K_RR = kernel_ref(R, R, "rbf", gamma=0.4)
    expect = []
    for a in alphas:
        pred = np.empty_like(y)
        for f in range(3):
            tr, te = rf != f, rf == f
            if not te.any():
                continue
            A = sparse_ref(kernel_ref(R, X[tr], "rbf", gamma=0.4), K_RR, laplacian_pairs(qid[tr], None, "pair"),
                           y[tr], a)
            pred[te] = kernel_ref(X[te], R, "rbf", gamma=0.4) @ A
        if scoring == "squared":
            rr = y - pred
            n_pairs = sum(len(U) * (len(U) - 1) // 2 for U in groups_of(qid))
            expect.append(rr @ L_all @ rr / n_pairs)
        else:
            expect.append(metrics.disagreement(y, pred, qid))
    np.testing.assert_allclose(res.scores, expect, rtol=1e-8, atol=1e-12)
    assert m.best_alpha_ == res.best_alpha and m.cv_results_ is res


@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(1, 40), seed=st.integers(0, 10_000), global_group=st.booleans())
@example(max_rows=1, seed=3643, global_group=False)   # every group tied: no pair, the model is 0
def test_block_cuttings_give_the_same_model(max_rows, seed, global_group):
    rng = np.random.default_rng(seed)
    X, y, qid, _ = make_groups(rng, n_groups=5, n_features=3, levels=3)
    q = None if global_group else qid
    kw = dict(gamma=0.5, alpha=0.3, n_basis=7, random_state=seed, ties="exclude")
    ref = sr.KernelRankRLS(**kw).fit(X, y, q, max_rows=10_000)
    cut = sr.KernelRankRLS(**kw).fit(sr.as_source(X, y, q), max_rows=max_rows)
    np.testing.assert_array_equal(cut.basis_, ref.basis_)           # reservoir independent of cutting
    L = laplacian_pairs(np.zeros(len(y)) if global_group else qid, y, "pair", "exclude")
    R = ref.basis_
    A = sparse_ref(kernel_ref(R, X, "rbf", gamma=0.5), kernel_ref(R, R, "rbf", gamma=0.5), L, y, 0.3)
    if not L.any():
        # every group's labels tie and ties are excluded: no pair, the exact model is 0 (a relative error
        # against 0 means nothing; the split-group sums of a 1-row cutting leave ~1e-16 of rounding)
        assert np.abs(ref.dual_coef_).max() < 1e-12 and np.abs(cut.dual_coef_).max() < 1e-12
        return
    assert _rel(cut.dual_coef_, ref.dual_coef_) < 1e-9
    assert _rel(cut.dual_coef_, A) < 1e-8


@pytest.mark.slow   # many reservoir draws: ~2 s warm
def test_reservoir_is_uniform_enough():
    # each of 20 rows should be picked with probability 5/20 over seeds
    X = np.arange(20, dtype=float)[:, None]
    y = np.zeros(20)
    counts = np.zeros(20)
    for seed in range(400):
        m = sr.KernelRankRLS(kernel="linear", n_basis=5, random_state=seed).fit(sr.as_source(X, y), max_rows=3)
        counts[m.basis_[:, 0].astype(int)] += 1
    assert counts.sum() == 2000
    assert np.all(np.abs(counts / 400 - 0.25) < 0.1)


def test_sparse_csr_and_semidefinite_basis(rng):
    X, y, qid, _ = make_groups(rng, n_groups=5, n_features=4)
    X[X < 0.1] = 0.0
    Xs = sp.csr_matrix(X)
    a = sr.KernelRankRLS(gamma=0.4, n_basis=6, random_state=2).fit(Xs, y, qid)
    b = sr.KernelRankRLS(gamma=0.4, n_basis=6, random_state=2).fit(X, y, qid)
    assert sp.issparse(a.basis_)
    assert _rel(a.dual_coef_, b.dual_coef_) < 1e-10
    # duplicated basis rows and a linear kernel with r > n_features: K_RR singular, same function as dual
    R = np.vstack([X[:5], X[:5]])
    lin = sr.KernelRankRLS(kernel="linear", alpha=0.5, basis=R).fit(X, y, qid)
    dual = sr.KernelRankRLS(kernel="linear", alpha=0.5).fit(X, y, qid)
    Xt = rng.normal(size=(4, 4))
    assert _rel(lin.predict(Xt), dual.predict(Xt)) < 1e-8


def test_sparse_bad_input(rng):
    X, y, qid, _ = make_groups(rng, n_groups=3, n_features=3)
    with pytest.raises(ValueError, match="exceeds the number of training rows"):
        sr.KernelRankRLS(n_basis=len(y) + 1).fit(sr.as_source(X, y, qid))
    with pytest.raises(ValueError, match="basis has 2 features"):
        sr.KernelRankRLS(basis=X[:3, :2]).fit(X, y, qid)
    with pytest.raises(ValueError, match="leave_pair_out is implemented for the exact dual"):
        sr.KernelRankRLS(n_basis=3).fit(X, y).leave_pair_out([[0, 1]])
    with pytest.raises(ValueError, match="not positive semidefinite"):
        sr.KernelRankRLS(kernel=lambda a, b: -(a @ b.T), n_basis=3).fit(X, y, qid)


def test_sparse_from_a_group_store_equals_arrays(rng, tmp_path):
    X, y, qid, _ = make_groups(rng, n_groups=8, n_features=3)
    X = X.astype(np.float32)
    store = sr.GroupStore.create(tmp_path / "s", n_features=3)
    store.append(X, y, qid)
    store = sr.GroupStore.open(tmp_path / "s")
    kw = dict(gamma=0.5, alpha=0.3, n_basis=6, random_state=4, group_weight="size")
    a = sr.KernelRankRLS(**kw).fit(store, max_rows=9)
    b = sr.KernelRankRLS(**kw).fit(X, y, qid)
    np.testing.assert_array_equal(a.basis_, b.basis_)
    assert _rel(a.dual_coef_, b.dual_coef_) < 1e-10
    assert _rel(a.leave_query_out(), b.leave_query_out()) < 1e-10
    sr.save(a, tmp_path / "model")
    np.testing.assert_array_equal(sr.load(tmp_path / "model").predict(X), a.predict(X))


def test_sparse_kfold_cross_validation_keeps_row_weights(rng):
    """A weighted source: every fold model and its held-out loss use the pair weights w_i w_j (the fold
    statistics dropped the weights before, so CV judged unweighted models of a weighted fit)."""
    import itertools

    from streamrank.io.weighted import with_weights
    from streamrank.rankrls.selection import fold_of

    X, y, qid, _ = make_groups(rng, n_groups=9, n_features=3, levels=3, min_size=2)
    w = rng.uniform(0.2, 3.0, len(y))
    R = X[[0, 4, 8, 12]]
    alphas = [0.05, 1.0, 20.0]
    m = sr.KernelRankRLS(gamma=0.4, basis=R).fit(with_weights(sr.as_source(X, y, qid), w), max_rows=7)
    res = m.cross_validate(None, alphas, folds=3)

    def weighted_laplacian(rows):
        L = np.zeros((len(y), len(y)))
        for U in groups_of(qid):
            for i, j in itertools.combinations([u for u in U if u in rows], 2):
                e = np.zeros(len(y))
                e[i], e[j] = 1.0, -1.0
                L += w[i] * w[j] * np.outer(e, e)
        return L

    gq = np.unique(qid)
    fog = dict(zip(gq.tolist(), fold_of(gq, 3).tolist()))
    rf = np.array([fog[q] for q in qid])
    K_RR = kernel_ref(R, R, "rbf", gamma=0.4)
    K_RM = kernel_ref(R, X, "rbf", gamma=0.4)
    n_pairs = sum(len(U) * (len(U) - 1) // 2 for U in groups_of(qid))     # row pairs, unweighted
    expect = []
    for a in alphas:
        loss = 0.0
        for f in range(3):
            tr, te = set(np.flatnonzero(rf != f)), np.flatnonzero(rf == f)
            L = weighted_laplacian(tr)
            A = np.linalg.solve(K_RM @ L @ K_RM.T + a * K_RR, K_RM @ L @ y)
            r = np.zeros(len(y))
            r[te] = y[te] - K_RM[:, te].T @ A
            loss += r @ weighted_laplacian(set(te)) @ r
        expect.append(loss / n_pairs)
    np.testing.assert_allclose(res.scores, expect, rtol=1e-8, atol=1e-12)
